package server

import (
	"context"
	"errors"
	"fmt"
)

// RebootstrapError asks the supervisor to wipe the data dir and start the
// worker again, at Entrypoint (K4): after discovery, a joiner restarts
// clean with the leader it found.
type RebootstrapError struct {
	// Entrypoint is handed to the next worker: "boot" or "join:<leader address>".
	Entrypoint string
}

func (e *RebootstrapError) Error() string {
	return fmt.Sprintf("rebootstrap requested (next entrypoint %q)", e.Entrypoint)
}

// ErrExpelled: the instance was expelled from the cluster; it must not run again.
var ErrExpelled = errors.New("current instance is expelled from the cluster")

// RefusedError: the instance cannot start or join and restarting it would
// not help (a cluster_id mismatch, a duplicate instance_id, a changed
// identity on restart, ...). Its message is the one line the user sees.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// RunInstance runs one instance (the supervisor's worker) until ctx ends
// (graceful shutdown) or it fails. entrypoint is what the previous worker
// asked for with a RebootstrapError ("" on a first start).
func RunInstance(ctx context.Context, cfg InstanceConfig, entrypoint string) error {
	return runInstance(ctx, cfg, entrypoint)
}
