// Package forward passes a gRPC call on to the instance that must serve it
// (the group-0 leader for the cluster's calls; a replicaset's leader for the
// data layer's), so that a client may call any instance.
//
// It owns the one-hop rule: a call is forwarded at most once (the
// x-shardkit-forwarded request header marks it), so two instances that
// disagree about who leads, as during an election, send the caller an
// Unavailable "retry" instead of passing the call back and forth. It also
// names the serving instance to the caller (Decision.Hint, sent back as a
// response header) so a smart client can go there directly next time.
//
// It must never decide where a call goes: the Route it is given does. It
// knows nothing of Raft, groups or buckets.
package forward
