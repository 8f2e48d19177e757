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
// Built with the "failpoints" tag, Config.Failpoints cuts links:
// raftDropTo/<peer address> drops what this transport sends to that peer,
// raftDropFrom/<peer address> what it receives from it (failpoint.go), a
// network partition for tests of the real binary that leaves its clients
// connected.
//
// It lives apart from multiraft so that the engine, and the state machines
// above it (group 0's internal/meta), import no network code: the instance
// (internal/cluster) builds the transport and hands it to the host.
package grpcnet
