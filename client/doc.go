// Package client is the one way Go code dials a shardkit cluster: the CLI,
// the cache template's lease store, the numerator's coordinator, the demo
// and the test harnesses all go through it, and so will every user's
// program.
//
// It owns: the transport credentials and dial options (DialOptions is the
// only function in shardkit that decides how a connection to an instance is
// secured), one connection per instance address, the choice of which
// instance to ask (the leader an earlier answer named first, then the
// configured peers in turn), the retries that are safe, and the mapping of
// gRPC answers to typed errors (Error, and the sentinels ErrUnavailable,
// ErrOutcomeUnknown, ErrInvalid, ...) that say whether a retry is safe.
//
// A Client is safe for concurrent use. Its calls are grouped by area:
// the cluster's own calls (Status, Expel) on Client, leases with fencing
// tickets on Client.Leases. The data layer's calls are added the same way.
//
// Pipelining: point reads made concurrently on one Client to the same
// instance share RPCs (writes too with Config.PipelineWrites; off by
// default, since each write is its own Raft proposal anyway and waiting
// for a slot only delays it). Those beyond Config.PipelineDepth under way to an
// address queue, and the next free slot sends all that wait (up to
// datav1.MaxMultiItems) as one DataService.Multi; the instance serves each
// item as its own call, and each caller gets its own answer or error, with
// its own context, exactly as alone. There is no timer: a call that finds a
// free slot goes out at once, as its unary call. An instance without Multi
// gets unary calls from then on. Config.DisablePipelining turns it off.
//
// It must never import shardkit's internal packages: it speaks only the
// public API in api/, so that it can be vendored and versioned on its own.
// It keeps no package-level state.
package client
