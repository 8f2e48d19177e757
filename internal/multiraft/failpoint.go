package multiraft

import "github.com/shardkit/shardkit/internal/failpoint"

// Failpoint names: the durability boundaries of a round.
const (
	// FailpointBeforeSave fires after the round's batch is built, before it
	// is committed.
	FailpointBeforeSave = "raftBeforeSave"
	// FailpointAfterSave fires after the batch is durable, before anything
	// else of the round happens.
	FailpointAfterSave = "raftAfterSave"
	// FailpointBeforeSend fires before messages are handed to the transport.
	FailpointBeforeSend = "raftBeforeSend"
	// FailpointBeforeApplySnapshot fires after a snapshot is durable, before
	// the state machine is restored from it.
	FailpointBeforeApplySnapshot = "raftBeforeApplySnapshot"
)

// Failpoints are the engine's test hooks (package failpoint: no-ops in
// release builds).
type Failpoints = failpoint.Points
