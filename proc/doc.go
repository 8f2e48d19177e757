// Package proc is the API of stored procedures (seed 001, R11): Go
// functions compiled into the shardkit binary that run on one replicaset,
// next to its data, called with `shardkit call` / `map-call` or the
// client's Call and MapCall.
//
// A procedure is ro (it may run on any member of a replicaset and only
// reads) or rw (it runs on the replicaset's leader and may write, through
// the same atomic per-bucket batches every write goes through, so its
// writes are replicated and deduplicated like any other). It gets a
// Context with its replicaset's data and its arguments as a tuple, and
// returns a tuple.
//
// shardkit's built-in procedures are Builtins (count, echo, buckets). To
// add your own, build your own binary: pass them to cmd/shardkit/app.Main,
// which serves them next to the built-ins (examples/procedures shows one;
// docs/data.md walks through it).
//
// It owns the procedure types and the registry. It must never import
// shardkit's internal packages (the server implements Context) and keeps
// no package-level state.
package proc
