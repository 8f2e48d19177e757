package replicaset

import "context"

// Deliberate defects, each behind a failpoint (a hook that returns an
// error turns it on), so that the robustness test can show that its
// history check catches them (docs/testing.md, "Robustness"). Builds
// without the failpoints tag have none of them.
const (
	// FailpointSkipReadIndex: the leader serves rw reads from what it has
	// applied, without confirming with a quorum that it still leads (a
	// leader cut off from its followers serves stale reads).
	FailpointSkipReadIndex = "replicaset/defect-skip-read-index"
	// FailpointForgetRequestID: the apply does not look a write's request
	// id up, so a retried write whose first attempt was applied applies
	// twice. It must be set on every member (it changes what the apply
	// does), as the environment variable of the robustness run does.
	FailpointForgetRequestID = "replicaset/defect-forget-request-id"
)

// readIndex waits until this member has applied everything committed when
// it was called (multiraft.Group.ReadIndex), unless the defect
// FailpointSkipReadIndex is on.
func (s *Storage) readIndex(ctx context.Context) error {
	if s.sm.fp.Eval(FailpointSkipReadIndex) != nil {
		return nil
	}
	return s.g.ReadIndex(ctx)
}

// remembersRequests reports whether the apply looks request ids up: true
// unless the defect FailpointForgetRequestID is on.
func (sm *SM) remembersRequests() bool {
	return sm.fp.Eval(FailpointForgetRequestID) == nil
}
