package multiraft

import (
	"bytes"
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
	// A transfer under way: no lease reads until it ends (4). After a
	// MsgTimeoutNow the lease is void for the term (noteOutgoing).
	st := g.rn.BasicStatus()
	if st.RaftState != raft.StateLeader || st.GetTerm() != g.lease.term || st.LeadTransferee != 0 {
		return 0, false
	}
	now := g.host.now()
	if now >= g.lease.until && !g.host.leaseUnchecked() {
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
	if st.GetCommit() < g.termStart {
		return // (2) not before an entry of this term is committed
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
// answer now (6): one that arrives within Config.voteGap of this member
// last hearing from a leader (a heartbeat, an append or a snapshot), or of
// opening the group (a restart forgets the leader it heard). A transfer's
// campaign is answered: the leader that started it gave up its lease (4).
func (g *group) holdsVote(m *raftpb.Message, now time.Duration) bool {
	t := m.GetType()
	if t != raftpb.MessageType_MsgVote && t != raftpb.MessageType_MsgPreVote {
		return false
	}
	return now < g.votesFrom && !bytes.Equal(m.GetContext(), campaignTransfer)
}

// campaignTransfer is the context raft gives the votes of a campaign that
// MsgTimeoutNow started (raft's unexported campaignTransfer).
var campaignTransfer = []byte("CampaignTransfer")

// heardLeader notes that this member stepped a message only a leader sends
// (6): it answers no vote request for the next voteGap.
func (g *group) heardLeader(now time.Duration) {
	g.votesFrom = max(g.votesFrom, now+g.host.voteGap)
}

// voteGap is how long a member refuses vote requests after it last heard
// from a leader, or after it opened a group (6): one tick less than an
// election timeout, which raft's own elections wait at least.
func (c *Config) voteGap() time.Duration {
	return time.Duration(c.ElectionTicks-1) * c.TickInterval
}

// noteTermStart records, as this member becomes leader, the index of the
// empty entry raft appends to open its term (in the Ready that says so).
func (g *group) noteTermStart(ents []*raftpb.Entry) {
	term := g.rn.BasicStatus().GetTerm()
	for _, e := range ents {
		if e.GetTerm() == term {
			g.termStart = e.GetIndex()
			return
		}
	}
	g.log.Error("raft made this member leader without an entry of its term in the same Ready", "term", term)
}

// readFloor is the index a read confirmed at index waits for. A leader
// waits at least for its term's first entry: raft confirms a read index
// of a group with one voter at once, with the commit index it knows, and
// after a restart that may lag what was committed (and acknowledged)
// before: the commit index is written without a sync. Entries of the term
// commit only with every entry before them.
func (g *group) readFloor(index uint64) uint64 {
	if g.soft.RaftState == raft.StateLeader {
		return max(index, g.termStart)
	}
	return index
}
