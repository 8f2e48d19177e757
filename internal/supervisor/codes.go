package supervisor

import (
	"errors"
	"time"
)

// Exit codes with a meaning to the parent. Any other non-zero exit code of
// the worker is a crash.
const (
	// ExitRebootstrap: the worker wrote a rebootstrap request on fd 3; the
	// parent wipes the data dir and starts a new worker at the requested
	// entrypoint.
	ExitRebootstrap = 90
	// ExitRefused: the worker refused to start (a cluster_id mismatch, a
	// duplicate instance_id, a changed identity, a bad configuration, ...)
	// and printed one line on stderr saying why. Restarting would not help:
	// the parent exits with this code too.
	ExitRefused = 91
	// ExitExpelled: the instance was expelled from the cluster. The parent
	// exits with this code too and never restarts it.
	ExitExpelled = 92
)

// Environment variables the parent sets for the worker.
const (
	EnvWorker     = "SHARDKIT_SUPERVISED_WORKER"
	EnvEntrypoint = "SHARDKIT_ENTRYPOINT"
	EnvParentPID  = "SHARDKIT_SUPERVISOR_PID"
	EnvPipe       = "SHARDKIT_SUPERVISOR_PIPE"
)

// requestFD is the worker's end of the request pipe.
const requestFD = 3

// Defaults of Config.
const (
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	DefaultResetAfter     = 30 * time.Second
	// DefaultQuickRebootstraps rebootstraps in a row, each by a worker that
	// ran less than ResetAfter, restart at once; more are delayed like
	// crashes (a worker that keeps asking would otherwise spin).
	DefaultQuickRebootstraps = 3
)

// Sentinel errors.
var (
	// ErrNotWorker: a worker-side call in a process the supervisor did not start.
	ErrNotWorker = errors.New("supervisor: this process is not a supervised worker (started without `shardkit run`'s parent)")
	// ErrParentGone: the parent died before the worker armed its death signal.
	ErrParentGone = errors.New("supervisor: the parent process is gone; the worker must exit")
	// ErrUnsafeDataDir: the data dir is one the supervisor refuses to wipe.
	ErrUnsafeDataDir = errors.New("supervisor: refusing to wipe this data dir")
	// ErrBadRequest: a rebootstrap request that cannot be decoded or is too large.
	ErrBadRequest = errors.New("supervisor: bad request from the worker")
)
