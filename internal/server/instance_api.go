package server

import (
	"context"

	"github.com/shardkit/shardkit/internal/cluster"
)

// The errors RunInstance ends with are the cluster's own, named here for
// the supervisor's side (internal/cli) so it need not import cluster.
type (
	// RebootstrapError asks the supervisor to wipe the data dir and start
	// the worker again at Entrypoint ("boot" or "join:<leader address>"),
	// K4: after discovery, a joiner restarts clean with the leader it found.
	RebootstrapError = cluster.RebootstrapRequest
	// RefusedError: the instance cannot start or join and restarting it
	// would not help (a cluster_id mismatch, a duplicate instance_id, a
	// changed identity on restart, ...). Its message is the one line the
	// user sees.
	RefusedError = cluster.RefusedError
)

// ErrExpelled: the instance was expelled from the cluster; it must not run again.
var ErrExpelled = cluster.ErrExpelled

// RunInstance runs one instance (the supervisor's worker) until ctx ends
// (graceful shutdown) or it fails. entrypoint is what the previous worker
// asked for with a RebootstrapError ("" on a first start).
func RunInstance(ctx context.Context, cfg InstanceConfig, entrypoint string) error {
	return runInstance(ctx, cfg, entrypoint)
}
