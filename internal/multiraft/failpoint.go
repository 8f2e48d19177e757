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

// FailpointLeaseUnchecked is a deliberate defect for the robustness test
// (a hook that returns an error turns it on): a leader that took a lease
// serves reads under it for the rest of its term, whether or not it ran
// out, so a leader cut off from its followers serves stale reads until
// CheckQuorum makes it step down.
const FailpointLeaseUnchecked = "raftDefectLeaseUnchecked"

// leaseUnchecked reports whether the defect FailpointLeaseUnchecked is on.
func (h *Host) leaseUnchecked() bool {
	return h.cfg.Failpoints.Eval(FailpointLeaseUnchecked) != nil
}

// Failpoints are the engine's test hooks (package failpoint: no-ops in
// release builds).
type Failpoints = failpoint.Points
