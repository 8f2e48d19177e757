// Package grpcnet is multiraft's production Transport over gRPC.
//
// Each Transport keeps one long-lived bidi stream per peer node that
// carries every group's messages, fed from a bounded queue per peer that
// drops on overflow (raft retransmits, so raft never waits for a slow
// peer), batched up to Config.MaxBatchBytes. A failed stream is reopened
// with a jittered doubling backoff, and the peer's address is looked up
// again (AddressResolver) before every reconnect, so an address may change
// at runtime. Snapshots go on streams of their own, in chunks of
// Config.SnapshotChunkBytes.
//
// It lives apart from multiraft so that the engine, and the state machines
// above it (group 0's internal/meta), import no network code: the instance
// (internal/cluster) builds the transport and hands it to the host.
package grpcnet
