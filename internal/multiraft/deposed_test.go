package multiraft_test

import (
	"context"
	"errors"
	"testing"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// TestAProposalOfADeposedLeaderEndsWhenItsEntryIsReplaced: a leader cut
// off from its followers appends a proposal that never commits; the
// others elect a leader of their own, which writes its own entries at
// that index; healed, the old leader's entry is replaced. Its proposer
// must get an answer then (ErrOutcomeUnknown or ErrProposalDropped), not
// wait for its context: a call without a deadline (a mover's step, once)
// would wait for ever. Two guards give it (apply.go): the replacing entry
// stored (assignIndexes), or applied (deliver); either alone passes this
// test, neither does not.
func TestAProposalOfADeposedLeaderEndsWhenItsEntryIsReplaced(t *testing.T) {
	c := newCluster(t, 1, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	var old multiraft.NodeID
	if !c.stepUntil(5000, func() bool { old, _ = c.leaderOf(g1, 0, 1, 2, 3); return old != 0 }) {
		t.Fatal("no leader")
	}
	c.proposeStepping(t, old, put("x", "1"))
	oldTerm := c.group(old, g1).Status().Term
	c.net.Isolate(old)
	base := c.group(old, g1).Status().LastIndex

	lost := async(func() error { _, err := c.propose(context.Background(), old, g1, put("lost", "1")); return err })
	if !c.stepUntilSettled(200, func() bool { return c.group(old, g1).Status().LastIndex > base }) {
		t.Fatal("the cut-off leader did not append the proposal")
	}
	var others []multiraft.NodeID
	for _, id := range []multiraft.NodeID{1, 2, 3} {
		if id != old {
			others = append(others, id)
		}
	}
	var lead multiraft.NodeID
	if !c.stepUntil(20000, func() bool { lead, _ = c.leaderOf(g1, oldTerm, others...); return lead != 0 }) {
		t.Fatal("the other two elected no leader")
	}
	c.proposeStepping(t, lead, put("y", "2")) // the new term's entries cover the lost one's index

	c.net.Heal()
	var err error
	done := c.stepUntilSettled(20000, func() bool {
		select {
		case err = <-lost:
			return true
		default:
			return false
		}
	})
	if !done {
		t.Fatal("the deposed leader's proposal got no answer after its entry was replaced")
	}
	if !errors.Is(err, multiraft.ErrOutcomeUnknown) && !errors.Is(err, multiraft.ErrProposalDropped) {
		t.Fatalf("the deposed leader's proposal: %v, want ErrOutcomeUnknown or ErrProposalDropped", err)
	}
	t.Logf("the deposed leader's proposal: %v", err)
	if _, ok := c.read(lead, g1, "lost"); ok {
		t.Fatal("the replaced entry was applied")
	}
}
