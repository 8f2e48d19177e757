package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/certs"
)

// newCertCmd is `shardkit cert`: the certificates of a secure cluster, in
// the style of `cockroach cert` (docs/security.md).
func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make and list the certificates of a secure cluster (CA, node, client)",
		Long: `Make and list the certificates of a secure cluster, in one directory:
ca.crt/ca.key (the cluster's CA), node.crt/node.key (an instance's, CN "node"),
client.<user>.crt/.key (a user's, CN = the user). Private keys are written 0600;
an existing file is kept unless --overwrite is given. See docs/security.md.`,
	}
	cmd.AddCommand(newCertCreateCACmd(), newCertCreateNodeCmd(), newCertCreateClientCmd(), newCertListCmd())
	return cmd
}

type certFlags struct {
	dir       string
	overwrite bool
	lifetime  time.Duration
}

func (f *certFlags) register(cmd *cobra.Command, lifetime time.Duration) {
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "certs-dir", os.Getenv("SHARDKIT_CERTS_DIR"), "the certificates' directory (env SHARDKIT_CERTS_DIR)")
	fl.BoolVar(&f.overwrite, "overwrite", false, "replace existing files (rotation: instances and clients pick new files up without a restart)")
	fl.DurationVar(&f.lifetime, "lifetime", lifetime, "how long the certificate is valid")
}

func (f *certFlags) options() (certs.Options, error) {
	if f.dir == "" {
		return certs.Options{}, &ExitError{Code: exitUsage, Err: errors.New("--certs-dir is required")}
	}
	if f.lifetime <= 0 {
		return certs.Options{}, &ExitError{Code: exitUsage, Err: fmt.Errorf("invalid --lifetime %v: must be positive", f.lifetime)}
	}
	return certs.Options{Overwrite: f.overwrite, Lifetime: f.lifetime}, nil
}

func certError(err error) error {
	if errors.Is(err, certs.ErrInvalid) || errors.Is(err, certs.ErrExists) {
		return &ExitError{Code: exitUsage, Err: err}
	}
	return err
}

func newCertCreateCACmd() *cobra.Command {
	var f certFlags
	var clusterID string
	cmd := &cobra.Command{
		Use:   "create-ca",
		Short: "Make the cluster's CA: ca.crt and ca.key",
		Long: `Make the cluster's CA: ca.crt and ca.key. Each CA has its own subject,
CN "shardkit CA [<cluster id> ]<key id>" (key id: the start of its key's
SHA-256 fingerprint), so that a certificate of another CA is refused with both CAs named.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			o.ClusterID = clusterID
			if err := certs.CreateCA(f.dir, o); err != nil {
				return certError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/%s and %s/%s (keep ca.key away from the instances if you can: they need only ca.crt)\n", f.dir, certs.CACert, f.dir, certs.CAKey)
			if list, err := certs.List(f.dir); err == nil {
				for _, in := range list {
					if in.File == certs.CACert && in.Err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "the CA is %q, key %s\n", in.Subject, in.KeyFingerprint)
					}
				}
			}
			return nil
		},
	}
	f.register(cmd, certs.DefaultCALifetime)
	cmd.Flags().StringVar(&clusterID, "cluster-id", "", "the cluster's name, as shardkit run --cluster-id has it, put in the CA's subject (optional)")
	return cmd
}

func newCertCreateNodeCmd() *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "create-node HOST...",
		Short: "Make an instance's certificate node.crt/node.key, valid for every HOST (names and IP addresses it is reached at)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, hosts []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			if err := certs.CreateNode(f.dir, hosts, o); err != nil {
				return certError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/%s and %s/%s for %s\n", f.dir, certs.NodeCert, f.dir, certs.NodeKey, strings.Join(hosts, ", "))
			return nil
		},
	}
	f.register(cmd, certs.DefaultCertLifetime)
	return cmd
}

func newCertCreateClientCmd() *cobra.Command {
	var f certFlags
	cmd := &cobra.Command{
		Use:   "create-client USER",
		Short: "Make a user's client certificate client.<USER>.crt/.key (CN = USER)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := f.options()
			if err != nil {
				return err
			}
			if err := certs.CreateClient(f.dir, args[0], o); err != nil {
				return certError(err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s/%s and %s/%s\n", f.dir, certs.ClientCertFile(args[0]), f.dir, certs.ClientKeyFile(args[0]))
			if args[0] != certs.RootUser {
				fmt.Fprintf(cmd.OutOrStdout(), "the cluster knows %s only once an admin runs: shardkit user create %s --role reader|writer|admin\n", args[0], args[0])
			}
			return nil
		},
	}
	f.register(cmd, certs.DefaultCertLifetime)
	return cmd
}

func newCertListCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the certificates of --certs-dir: subject, hosts, expiry",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return &ExitError{Code: exitUsage, Err: errors.New("--certs-dir is required")}
			}
			list, err := certs.List(dir)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FILE\tSUBJECT\tHOSTS\tEXPIRES")
			for _, in := range list {
				if in.Err != nil {
					fmt.Fprintf(tw, "%s\t(unreadable: %v)\t\t\n", in.File, in.Err)
					continue
				}
				exp := in.NotAfter.UTC().Format(time.RFC3339)
				if time.Now().After(in.NotAfter) {
					exp += " (EXPIRED)"
				}
				subject := in.Subject
				if in.IsCA {
					subject += " (CA, key " + in.KeyFingerprint + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", in.File, subject, strings.Join(in.Hosts, ","), exp)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "certs-dir", os.Getenv("SHARDKIT_CERTS_DIR"), "the certificates' directory (env SHARDKIT_CERTS_DIR)")
	return cmd
}
