package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/supervisor"
	"github.com/shardkit/shardkit/proc"
)

// exitBadConfig is the exit code of a `shardkit run` whose settings are
// invalid (in the parent; a worker reports supervisor.ExitRefused).
const exitBadConfig = 2

// stopMargin is added to --shutdown-timeout before the parent kills a
// worker that does not stop: the worker needs time after its bounded wait
// to close its servers and database.
const stopMargin = 15 * time.Second

// runDeps are what `shardkit run` calls out to; tests replace them.
type runDeps struct {
	lookupEnv          func(string) (string, bool)
	readFile           func(string) ([]byte, error)
	args               func() []string // the parent's own arguments, for the worker
	isWorker           func() bool
	entrypoint         func() string
	attachWorker       func() error
	requestRebootstrap func(string) error
	supervise          func(context.Context, supervisor.Config) (int, error)
	runInstance        func(context.Context, server.InstanceConfig, string) error
	// procedures the instance serves (nil: proc.Builtins).
	procedures *proc.Registry
}

func defaultRunDeps() runDeps {
	return runDeps{
		lookupEnv:          os.LookupEnv,
		readFile:           readConfigFile,
		args:               func() []string { return os.Args[1:] },
		isWorker:           supervisor.IsWorker,
		entrypoint:         supervisor.Entrypoint,
		attachWorker:       supervisor.AttachWorker,
		requestRebootstrap: supervisor.RequestRebootstrap,
		supervise:          supervisor.Run,
		runInstance:        server.RunInstance,
	}
}

func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// One byte more than the limit, so that the parser sees a file too large.
	return io.ReadAll(io.LimitReader(f, maxConfigFileBytes+1))
}

func newRunCmd(procs *proc.Registry) *cobra.Command {
	deps := defaultRunDeps()
	deps.procedures = procs
	return newRunCmdWith(deps)
}

func newRunCmdWith(deps runDeps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a cluster instance (a supervisor parent and its worker)",
		Long: `Run one cluster instance. The process started is a supervisor: it runs the
instance in a child process (the same binary), forwards SIGINT/SIGTERM to it,
restarts it after a crash, and wipes the data dir and restarts it when the
instance asks (rebootstrap). See docs/operations.md.

Every flag can also be given as the environment variable SHARDKIT_<FLAG>
(upper case, dashes as underscores) and as a key of the --config YAML file;
a flag wins over the environment, which wins over the file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			worker := deps.isWorker()
			cfg, err := loadRunConfig(cmd.Flags(), deps.lookupEnv, deps.readFile)
			if err != nil {
				code := exitBadConfig
				if worker {
					code = supervisor.ExitRefused // the file changed under a running parent: do not restart
				}
				return &ExitError{Code: code, Err: err}
			}
			cfg.Logger = newLogger(cfg.LogLevel, cfg.LogFormat, cmd.ErrOrStderr())
			cfg.Procedures = deps.procedures
			if worker {
				return runWorker(cmd.Context(), deps, cfg)
			}
			return runParent(cmd, deps, cfg)
		},
	}
	addRunFlags(cmd.Flags())
	return cmd
}

// runParent supervises workers until one stops for good.
func runParent(cmd *cobra.Command, deps runDeps, cfg server.InstanceConfig) error {
	// The supervisor reacts to SIGINT/SIGTERM itself, forwarding the very
	// signal; the command's context (cancelled by the same signals) must
	// not stop it a second time.
	ctx := context.WithoutCancel(cmd.Context())
	server.LogSecurity(cfg.Logger, cfg)
	code, err := deps.supervise(ctx, supervisor.Config{
		Args:        deps.args(),
		DataDir:     cfg.DataDir,
		Stdout:      cmd.OutOrStdout(),
		Stderr:      cmd.ErrOrStderr(),
		Logger:      cfg.Logger.With("component", "supervisor"),
		StopTimeout: cfg.ShutdownTimeout + stopMargin,
	})
	if err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	if code != 0 {
		// The worker has said why on stderr, or the supervisor logged it.
		return &ExitError{Code: code, Err: fmt.Errorf("instance exited with code %d", code), Quiet: true}
	}
	return nil
}

// runWorker runs the instance and maps how it ended to an exit code.
func runWorker(ctx context.Context, deps runDeps, cfg server.InstanceConfig) error {
	if err := deps.attachWorker(); err != nil {
		return &ExitError{Code: 1, Err: err}
	}
	err := deps.runInstance(ctx, cfg, deps.entrypoint())
	return workerExit(ctx, err, deps.requestRebootstrap)
}

// workerExit maps RunInstance's result to the worker's exit.
func workerExit(ctx context.Context, err error, requestRebootstrap func(string) error) error {
	if err == nil || (ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return nil
	}
	var rb *server.RebootstrapError
	if errors.As(err, &rb) {
		if rerr := requestRebootstrap(rb.Entrypoint); rerr != nil {
			return &ExitError{Code: 1, Err: fmt.Errorf("cannot ask the supervisor for a rebootstrap: %w", rerr)}
		}
		return &ExitError{Code: supervisor.ExitRebootstrap, Err: err, Quiet: true}
	}
	if errors.Is(err, server.ErrExpelled) {
		return &ExitError{Code: supervisor.ExitExpelled, Err: oneLineErr(err)}
	}
	var refused *server.RefusedError
	if errors.As(err, &refused) {
		return &ExitError{Code: supervisor.ExitRefused, Err: oneLineErr(err)}
	}
	return &ExitError{Code: 1, Err: oneLineErr(err)}
}

// oneLineErr keeps err for errors.Is/As but prints on one line.
func oneLineErr(err error) error {
	msg := oneLine(err.Error())
	if msg == err.Error() {
		return err
	}
	return &lineError{msg: msg, err: err}
}

type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.err }
