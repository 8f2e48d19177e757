package multiraft

import (
	"errors"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func entryOf(index, term, id uint64) *raftpb.Entry {
	return &raftpb.Entry{Index: new(index), Term: new(term), Data: encodeProposal(id, []byte("x"))}
}

// An uncommitted entry replaced in this host's log may still be committed
// by another leader: its proposer must not be told it was not applied.
func TestReplacedUncommittedEntryHasUnknownOutcome(t *testing.T) {
	g := &group{id: 1, waiters: map[uint64]*proposal{}, byIndex: map[uint64]*proposal{}}
	p := &proposal{id: 42, done: make(chan proposalResult, 1)}
	g.register(p)
	g.assignIndexes([]*raftpb.Entry{entryOf(11, 2, 42)})
	g.assignIndexes([]*raftpb.Entry{entryOf(11, 3, 7)})
	select {
	case r := <-p.done:
		if !errors.Is(r.err, ErrOutcomeUnknown) || errors.Is(r.err, ErrProposalDropped) {
			t.Fatalf("replaced proposal ended with %v, want ErrOutcomeUnknown", r.err)
		}
	default:
		t.Fatal("replaced proposal still waiting")
	}

	// Another entry applied at a waiting proposal's index settles it: dropped.
	q := &proposal{id: 43, done: make(chan proposalResult, 1)}
	g.register(q)
	g.assignIndexes([]*raftpb.Entry{entryOf(12, 3, 43)})
	g.deliver([]appliedResult{{id: 8, index: 12}})
	if r := <-q.done; !errors.Is(r.err, ErrProposalDropped) {
		t.Fatalf("proposal whose index was applied with another entry ended with %v, want ErrProposalDropped", r.err)
	}
}
