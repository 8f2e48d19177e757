package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
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
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
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

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "shardkit",
		Short:         "shardkit: sharded, replicated data on Raft",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newDemoCmd(),
		newRunCmd(), newStatusCmd(), newExpelCmd(),
		newCacheCmd(),
		newNumeratorCmd(), newBenchCmd(),
	)
	return root
}
