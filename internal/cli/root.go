package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/supervisor"
	"github.com/shardkit/shardkit/proc"
)

// ExitError carries a process exit code through cobra. Its message is
// printed as one line on stderr, unless Quiet (someone already said why:
// the supervised worker, on the same stderr).
type ExitError struct {
	Code  int
	Err   error
	Quiet bool
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Main runs the shardkit command line and returns the process exit code.
// procs are stored procedures the binary serves besides proc.Builtins when
// it runs an instance (`shardkit run`); cmd/shardkit/app passes them.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, procs ...proc.Procedure) int {
	ctx, stop := signal.NotifyContext(context.Background(), supervisor.StopSignals()...)
	defer stop()

	reg, err := proc.NewRegistry(append(proc.Builtins(), procs...)...)
	if err != nil {
		fmt.Fprintf(stderr, "shardkit: this binary's procedures: %v\n", err)
		return 1
	}
	root := newRootCmd(reg)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err = root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var exit *ExitError
	isExit := errors.As(err, &exit)
	if !isExit || !exit.Quiet {
		fmt.Fprintf(stderr, "shardkit: %v\n", err)
	}
	if isExit && exit.Code != 0 {
		return exit.Code
	}
	return 1
}

func newRootCmd(procs *proc.Registry) *cobra.Command {
	root := &cobra.Command{
		Use:           "shardkit",
		Short:         "shardkit: sharded, replicated data on Raft",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newDemoCmd(),
		newRunCmd(procs), newStatusCmd(), newExpelCmd(),
		newSpaceCmd(), newCallCmd(procs), newMapCallCmd(),
		newRebalanceCmd(), newReplicasetCmd(), newBucketCmd(), newReshardCmd(),
		newCacheCmd(), newCertCmd(), newUserCmd(), newBackupCmd(),
		newNumeratorCmd(), newBenchCmd(), newChangefeedCmd(), newSchedulerCmd(),
		newCheckDataCmd(),
	)
	root.AddCommand(newDataCmds()...)
	// cobra adds its completion command when the program runs; add it now,
	// so that its wrong command lines exit 2 as well.
	root.InitDefaultCompletionCmd()
	// Every command inherits it (cobra asks the parents).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	usageErrors(root)
	return root
}

// usageErrors makes a wrong command line exit with exitUsage (2) in every
// command, as docs/data.md's table of exit codes says: a wrong number of
// arguments and a mistyped subcommand (flag errors: root's FlagErrorFunc).
func usageErrors(cmd *cobra.Command) {
	if !cmd.Runnable() && cmd.HasSubCommands() {
		// A group (reshard, bucket, ...): cobra would print its help and
		// exit 0 for a mistyped subcommand, and a script would go on.
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				var names []string
				for _, sub := range c.Commands() {
					if sub.IsAvailableCommand() {
						names = append(names, sub.Name())
					}
				}
				return usagef("unknown command %q for %q; want one of: %s", args[0], c.CommandPath(), strings.Join(names, ", "))
			}
			return c.Help()
		}
	}
	if args := cmd.Args; args != nil {
		cmd.Args = func(c *cobra.Command, a []string) error {
			if err := args(c, a); err != nil {
				var exit *ExitError
				if errors.As(err, &exit) {
					return err
				}
				return usageError(err)
			}
			return nil
		}
	}
	for _, c := range cmd.Commands() {
		usageErrors(c)
	}
}
