package multiraft

import (
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// This file is the leader lease of the package documentation ("Lease
// reads"); the numbers in the comments are its steps.

// leaseState is a group's leader lease, guarded by group.mu.
type leaseState struct {
	term  uint64 // the term the lease was taken in (0: none yet)
	until time.Duration
	// epoch counts what voids a lease (an applied conf change); a read
	// index sent before it changed extends nothing.
	epoch uint64
	// noTerm is a term in which this member sent MsgTimeoutNow: no lease
	// again in that term (4).
	noTerm  uint64
	renewAt time.Duration // no renewing read index before this (3)

	readIndexes, served uint64 // Status.ReadIndexes, Status.LeaseReads
}

// leaseDuration is how long after a read index was sent its quorum's
// answers let the leader serve reads alone (1): 0 when lease reads are off.
func (c *Config) leaseDuration() time.Duration {
	if !c.LeaseReads || c.ElectionTicks < minLeaseElectionTicks {
		return 0
	}
	return time.Duration(c.ElectionTicks-2) * c.TickInterval * 9 / 10
}

// minLeaseElectionTicks is the smallest ElectionTicks that leaves a lease
// (ElectionTicks-2 ticks, see leaseDuration) worth having.
const minLeaseElectionTicks = 4

// leaseIndex returns the index a read arriving now may wait for without a
// read index round: the commit index, if this member leads under a lease
// (2). It starts a renewal when the lease is half gone (3).
func (g *group) leaseIndex() (uint64, bool) {
	d := g.host.leaseDur
	if d == 0 || g.lease.term == 0 {
		return 0, false
	}
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.GetTerm() != g.lease.term || st.GetTerm() == g.lease.noTerm || st.LeadTransferee != 0 {
		return 0, false
	}
	now := g.host.now()
	if now >= g.lease.until {
		return 0, false
	}
	if now >= g.lease.until-d/2 && now >= g.lease.renewAt {
		g.lease.renewAt = now + d/4
		g.sendReadIndex(&readRequest{id: g.host.newID(), done: make(chan error, 1)})
	}
	return st.GetCommit(), true
}

// sendReadIndex asks raft for a read index for r (and its riders). A
// leader notes when it asked, so that the answer can extend its lease (1).
func (g *group) sendReadIndex(r *readRequest) {
	if g.host.leaseDur > 0 {
		if st := g.rn.BasicStatus(); st.RaftState == raft.StateLeader {
			r.sentAt, r.term, r.epoch = g.host.now(), st.GetTerm(), g.lease.epoch
		}
	}
	g.pendingReads[r.id] = r
	g.lease.readIndexes++
	g.rn.ReadIndex(readCtx(r.id))
}

// extendLease takes the lease from a read index this leader sent and a
// quorum confirmed (1), unless something voided it since (4, 5).
func (g *group) extendLease(r *readRequest) {
	if r.term == 0 {
		return
	}
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.GetTerm() != r.term || r.epoch != g.lease.epoch || r.term == g.lease.noTerm {
		return
	}
	if g.lease.term != r.term {
		g.lease.term, g.lease.until = r.term, 0
	}
	g.lease.until = max(g.lease.until, r.sentAt+g.host.leaseDur)
}

// voidLease ends the lease at once (4, 5): reads go back to read indexes
// until one sent after this point is confirmed.
func (g *group) voidLease() {
	g.lease.epoch++
	g.lease.until = 0
}

// noteOutgoing voids the lease for the rest of the term when this leader
// hands leadership over (4): MsgTimeoutNow makes its receiver campaign at
// once, and voters grant that campaign their vote even within a lease.
func (g *group) noteOutgoing(m *raftpb.Message) {
	if m.GetType() == raftpb.MessageType_MsgTimeoutNow {
		g.lease.noTerm = max(g.lease.noTerm, m.GetTerm())
		g.voidLease()
	}
}

// holdsVote reports whether m is a vote request this member must not
// answer yet: for an election timeout after the group opened here it
// grants no vote (6), because it may have promised a leader, before it
// restarted, not to vote for anyone else until that leader's lease ended.
func (g *group) holdsVote(m *raftpb.Message) bool {
	if g.voteHoldTicks <= 0 {
		return false
	}
	t := m.GetType()
	return t == raftpb.MessageType_MsgVote || t == raftpb.MessageType_MsgPreVote
}
