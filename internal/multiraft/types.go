package multiraft

import (
	"context"
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3/raftpb"
)

// NodeID is the Raft id of one process (instance). It is the same in every
// group the process is a member of, and is never reused.
type NodeID uint64

// GroupID names one Raft group within a cluster.
type GroupID uint64

// Entry is one committed command handed to a StateMachine.
type Entry struct {
	Index uint64
	Term  uint64
	Cmd   []byte
}

// StateMachine is the replicated state of one group. Its data lives in the
// host's Pebble database, outside the engine's "raft/" keys.
//
// The engine calls Apply, Snapshot and Restore of one group from one
// goroutine at a time, except Snapshot, which runs on a consistent view of
// the database concurrently with Apply.
type StateMachine interface {
	// Apply applies a run of committed commands in index order. It writes
	// its effects into b (an indexed batch: reads through b see the run's
	// earlier writes); the engine adds the applied index to b and commits b,
	// so the state machine's writes and the applied index are durable
	// together or not at all. After a crash the engine re-delivers exactly
	// the entries after the last durable applied index, so no command's
	// effect is ever applied twice.
	//
	// It returns one result per entry, handed to the proposer of that entry
	// (nil is fine). Failures of a command (a key exists, a check fails) are
	// results. An error return means the state machine cannot go on (a
	// storage failure); the engine stops the whole host, as for a failure
	// to persist its own state (Config.OnFatal).
	Apply(b *pebble.Batch, entries []Entry) ([]any, error)

	// Snapshot writes the state machine's data, as it is in r, to w. r is a
	// consistent view of the database at an applied index the engine
	// records in the snapshot's metadata.
	Snapshot(ctx context.Context, r pebble.Reader, w io.Writer) error

	// Restore replaces the state machine's data with the data of a snapshot
	// read from r: it removes all of its own keys first, then writes the
	// snapshot's, in batches of its choosing. It must be repeatable: after a
	// crash in the middle the engine calls Restore again with the same data.
	// The engine records the snapshot's applied index after Restore returns.
	Restore(ctx context.Context, db *pebble.DB, r io.Reader) error
}

// ApplyObserver is an optional interface of a StateMachine that keeps
// state in memory beside its data in the database (a cache its Apply
// reads and changes): it learns the fate of the batch its Apply calls
// wrote into. The engine calls ApplyDone once after the Apply calls of
// one batch (a batch may hold several runs: a conf change splits them),
// from the goroutine that called Apply, before the entries' results are
// handed to their proposers: with committed true once the batch is
// committed, false when it was dropped (an Apply or the commit failed;
// the host then stops). A state machine that gets false forgets what
// those Apply calls changed in memory (it reloads it from the database).
type ApplyObserver interface {
	ApplyDone(committed bool)
}

// OutboundMessage is a Raft message of one group, addressed to Msg.To.
type OutboundMessage struct {
	Group GroupID
	Msg   *raftpb.Message
}

// Transport moves Raft messages between hosts.
type Transport interface {
	// Send queues messages for delivery. It must not block: a transport
	// that cannot keep up drops messages (Raft retransmits).
	Send(msgs []OutboundMessage)
	// SendSnapshot streams one snapshot to node to. msg is the MsgSnap that
	// announces it (metadata filled in, data empty); write produces the
	// data. It returns once the receiver has stored the snapshot or refused.
	SendSnapshot(ctx context.Context, to NodeID, group GroupID, msg *raftpb.Message, write func(io.Writer) error) error
}

// Handler receives what a Transport delivers to this host.
type Handler interface {
	// HandleRaftMessage takes one inbound message. It does not block.
	HandleRaftMessage(group GroupID, msg *raftpb.Message)
	// HandleRaftSnapshot stores one inbound snapshot whose data is read
	// from body, then hands its MsgSnap to the group.
	HandleRaftSnapshot(ctx context.Context, group GroupID, msg *raftpb.Message, body io.Reader) error
	// ReportUnreachable tells Raft that messages to node were lost.
	ReportUnreachable(node NodeID)
}

// Errors of the engine.
var (
	// ErrProposalDropped: Raft did not take the proposal (no leader known,
	// a leadership transfer in progress, too many uncommitted entries), or
	// another entry was applied at its place in the log. It was not
	// applied; retry.
	ErrProposalDropped = errors.New("multiraft: proposal dropped, not applied; retry")
	// ErrGroupNotFound: the host has no such group open.
	ErrGroupNotFound = errors.New("multiraft: group not found on this host")
	// ErrGroupExists: OpenGroup was called twice for the same group.
	ErrGroupExists = errors.New("multiraft: group is already open")
	// ErrStopped: the host or the group has been stopped.
	ErrStopped = errors.New("multiraft: stopped")
	// ErrStorage: the host could not persist its Raft state and stopped;
	// nothing it had not yet persisted was acknowledged.
	ErrStorage = errors.New("multiraft: storage failure, host stopped")
)
