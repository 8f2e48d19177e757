package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/client"
)

// newUserCmd is `shardkit user`: the users of a secure cluster and their
// roles (docs/security.md). Only an admin may run these.
func newUserCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Users of a secure cluster and their roles (admin, writer, reader)",
		Long: `Users of a cluster run with --certs-dir. A user is the CN of a client
certificate (shardkit cert create-client USER); its role says what it may do:
reader reads and calls ro procedures; writer also writes, calls rw procedures
and uses leases; admin also does DDL, users, expel, weights, moves and the
rebalancer. root is always admin and cannot be dropped.`,
	}
	role := func(c *cobra.Command, r *string) {
		c.Flags().StringVar(r, "role", "", "admin, writer or reader (required)")
	}
	var f clusterFlags
	create := &cobra.Command{Use: "create NAME --role ROLE [--password-stdin]", Short: "Add a user with a role (and a password for the web console)", Args: cobra.ExactArgs(1)}
	var createRole string
	var createPw bool
	role(create, &createRole)
	create.Flags().BoolVar(&createPw, "password-stdin", false, "read the user's password for the web console's login from the first line of stdin")
	create.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkRole(createRole); err != nil {
			return err
		}
		var pw string
		if createPw {
			var err error
			if pw, err = readPassword(cmd.InOrStdin()); err != nil {
				return err
			}
		}
		return f.do(cmd, "create user "+args[0], func(ctx context.Context, cl *client.Client) error {
			if err := cl.CreateUserWithPassword(ctx, args[0], createRole, pw); err != nil {
				return err
			}
			with := ""
			if pw != "" {
				with = " and a password"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s created with role %s%s\n", args[0], createRole, with)
			return nil
		})
	}
	setPw := &cobra.Command{Use: "set-password NAME --password-stdin | --remove", Short: "Set (or remove) a user's password for the web console", Args: cobra.ExactArgs(1)}
	var setPwStdin, removePw bool
	setPw.Flags().BoolVar(&setPwStdin, "password-stdin", false, "read the new password from the first line of stdin")
	setPw.Flags().BoolVar(&removePw, "remove", false, "remove the user's password: it can no longer log in to the web console")
	setPw.RunE = func(cmd *cobra.Command, args []string) error {
		if setPwStdin == removePw {
			return usagef("give --password-stdin (and the password on stdin) or --remove")
		}
		var pw string
		if setPwStdin {
			var err error
			if pw, err = readPassword(cmd.InOrStdin()); err != nil {
				return err
			}
		}
		return f.do(cmd, "set password of "+args[0], func(ctx context.Context, cl *client.Client) error {
			if err := cl.SetUserPassword(ctx, args[0], pw); err != nil {
				return err
			}
			if removePw {
				fmt.Fprintf(cmd.OutOrStdout(), "user %s has no password now\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "user %s has a new password\n", args[0])
			}
			return nil
		})
	}
	setRole := &cobra.Command{Use: "set-role NAME --role ROLE", Short: "Change a user's role", Args: cobra.ExactArgs(1)}
	var newRole string
	role(setRole, &newRole)
	setRole.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkRole(newRole); err != nil {
			return err
		}
		return f.do(cmd, "set role of "+args[0], func(ctx context.Context, cl *client.Client) error {
			if err := cl.SetUserRole(ctx, args[0], newRole); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "user %s now has role %s\n", args[0], newRole)
			return nil
		})
	}
	drop := &cobra.Command{Use: "drop NAME", Short: "Remove a user (root cannot be dropped)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.do(cmd, "drop user "+args[0], func(ctx context.Context, cl *client.Client) error {
				if err := cl.DropUser(ctx, args[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "user %s dropped\n", args[0])
				return nil
			})
		}}
	list := &cobra.Command{Use: "list", Short: "List the users and their roles", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.do(cmd, "list users", func(ctx context.Context, cl *client.Client) error {
				users, err := cl.Users(ctx)
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "USER\tROLE\tPASSWORD")
				for _, u := range users {
					pw := "-"
					if u.GetHasPassword() {
						pw = "yes"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\n", u.GetName(), client.RoleName(u.GetRole()), pw)
				}
				return tw.Flush()
			})
		}}
	for _, c := range []*cobra.Command{create, setPw, setRole, drop, list} {
		f.register(c.Flags(), 10*time.Second, "how long to wait for the cluster")
		cmd.AddCommand(c)
	}
	return cmd
}

// checkRole checks --role, which the command requires: one of the roles.
func checkRole(role string) error {
	if role == "" {
		return usagef("--role is required: admin, writer or reader")
	}
	if _, err := client.ParseRole(role); err != nil {
		return usagef("invalid --role %q: want admin, writer or reader", role)
	}
	return nil
}

// readPassword reads a password from the first line of r (its line break
// dropped), as `docker login --password-stdin` does; it is never echoed or
// logged. What is wrong with it is said by the leader, which hashes it.
func readPassword(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the password from stdin: %w", err)
	}
	pw := strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if pw == "" {
		return "", usagef("--password-stdin: stdin holds no password (give it on the first line)")
	}
	return pw, nil
}
