package multiraft

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// Group is the handle of one open group, safe for concurrent use.
type Group struct{ g *group }

// ID returns the group's id.
func (G *Group) ID() GroupID { return G.g.id }

func (g *group) usable() error {
	if err := g.host.failed(); err != nil {
		return err
	}
	if g.host.stopped.Load() {
		return ErrStopped
	}
	return g.closed()
}

// Propose replicates cmd and returns the state machine's result for it once
// it is applied on this host. Concurrent proposals are appended together.
//
// Errors: ErrProposalDropped (not applied: no leader, or another entry
// was applied at its index; retry), ErrOutcomeUnknown (it may or may not be
// applied: joined with ctx.Err() when ctx ended first; also when its
// uncommitted entry was replaced, or covered by a snapshot), ErrStopped,
// ErrStorage.
func (G *Group) Propose(ctx context.Context, cmd []byte) (any, error) {
	g := G.g
	if err := g.usable(); err != nil {
		return nil, err
	}
	id := g.host.newID()
	p := &proposal{id: id, data: encodeProposal(id, cmd), done: make(chan proposalResult, 1)}
	return g.submit(ctx, p, &g.props)
}

// ProposeAs is Propose for a group whose state machine gives every
// command a result of type T (each state machine has its one result type:
// meta.Result, replicaset.Result, kvsm.Result), so that its callers read
// the result's fields and assert nothing. A result of another type is an
// error that names both types: the group runs another state machine than
// the caller thinks, and the command was applied.
func ProposeAs[T any](ctx context.Context, g *Group, cmd []byte) (T, error) {
	var zero T
	v, err := g.Propose(ctx, cmd)
	if err != nil {
		return zero, err
	}
	res, ok := v.(T)
	if !ok {
		return zero, fmt.Errorf("multiraft: group %d applied the command with a result of type %T, not %T", g.ID(), v, zero)
	}
	return res, nil
}

func (g *group) submit(ctx context.Context, p *proposal, queue *[]*proposal) (any, error) {
	g.register(p)
	g.inMu.Lock()
	if err := g.closedErr; err != nil {
		g.inMu.Unlock()
		g.abandon(p)
		return nil, err
	}
	*queue = append(*queue, p)
	wake := true
	if queue == &g.props {
		g.propBytes += len(p.data)
		// A held proposal is taken when the worker next runs the group
		// (the commit it waits for, or a tick, brings it back), unless it
		// makes the queue long enough to go at once.
		wake = !g.holding || g.heldEnough()
	}
	g.inMu.Unlock()
	if wake {
		g.host.sched.enqueue(g, flagInput)
	}
	select {
	case r := <-p.done:
		return r.value, r.err
	case <-ctx.Done():
		g.abandon(p)
		select {
		case r := <-p.done: // the result won the race
			return r.value, r.err
		default:
		}
		return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

// ChangeConfig proposes a configuration change and returns the
// configuration in force once it is applied on this host.
//
// Changes made through one host are serialized, and each waits until the
// group has left any joint configuration: raft ignores a conf change
// proposed while another is still unapplied.
func (G *Group) ChangeConfig(ctx context.Context, cc *raftpb.ConfChangeV2) (*raftpb.ConfState, error) {
	g := G.g
	if err := g.usable(); err != nil {
		return nil, err
	}
	select {
	case g.ccSem <- struct{}{}:
		defer func() { <-g.ccSem }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for G.Status().VotersOutgoing != nil {
		ch := g.watch()
		if len(G.Status().VotersOutgoing) == 0 {
			break
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return nil, fmt.Errorf("multiraft: group %d: still in a joint configuration: %w", g.id, ctx.Err())
		}
	}
	id := g.host.newID()
	cc.Context = binary.BigEndian.AppendUint64(nil, id)
	p := &proposal{id: id, cc: cc, done: make(chan proposalResult, 1)}
	v, err := g.submit(ctx, p, &g.confs)
	if err != nil {
		return nil, err
	}
	cs, _ := v.(*raftpb.ConfState)
	return cs, nil
}

func (G *Group) changeOne(ctx context.Context, t raftpb.ConfChangeType, node NodeID) (*raftpb.ConfState, error) {
	return G.ChangeConfig(ctx, &raftpb.ConfChangeV2{Changes: []*raftpb.ConfChangeSingle{
		{Type: t.Enum(), NodeId: new(uint64(node))},
	}})
}

// AddVoter adds node as a voter, or promotes it if it is a learner.
func (G *Group) AddVoter(ctx context.Context, node NodeID) (*raftpb.ConfState, error) {
	return G.changeOne(ctx, raftpb.ConfChangeType_ConfChangeAddNode, node)
}

// AddLearner adds node as a learner, or demotes it if it is a voter.
func (G *Group) AddLearner(ctx context.Context, node NodeID) (*raftpb.ConfState, error) {
	return G.changeOne(ctx, raftpb.ConfChangeType_ConfChangeAddLearnerNode, node)
}

// PromoteLearner makes a learner a voter.
func (G *Group) PromoteLearner(ctx context.Context, node NodeID) (*raftpb.ConfState, error) {
	return G.AddVoter(ctx, node)
}

// DemoteVoter makes a voter a learner.
func (G *Group) DemoteVoter(ctx context.Context, node NodeID) (*raftpb.ConfState, error) {
	return G.AddLearner(ctx, node)
}

// RemoveNode removes node from the group.
func (G *Group) RemoveNode(ctx context.Context, node NodeID) (*raftpb.ConfState, error) {
	return G.changeOne(ctx, raftpb.ConfChangeType_ConfChangeRemoveNode, node)
}

// ReadIndex returns once this host has applied everything committed when
// the call was made: a read of the state machine after it is linearizable.
func (G *Group) ReadIndex(ctx context.Context) error {
	g := G.g
	if err := g.usable(); err != nil {
		return err
	}
	r := &readRequest{id: g.host.newID(), done: make(chan error, 1)}
	g.inMu.Lock()
	if err := g.closedErr; err != nil {
		g.inMu.Unlock()
		return err
	}
	g.reads = append(g.reads, r)
	g.inMu.Unlock()
	g.host.sched.enqueue(g, flagInput)
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TransferLeadership asks the leader to hand leadership to node and waits
// until node leads (or ctx ends). Call it on any member; it is passed to
// the leader.
func (G *Group) TransferLeadership(ctx context.Context, to NodeID) error {
	g := G.g
	if err := g.usable(); err != nil {
		return err
	}
	for {
		ch := g.watch()
		if NodeID(g.leader.Load()) == to {
			return nil
		}
		if err := g.usable(); err != nil {
			return err
		}
		g.inMu.Lock()
		g.transfers = append(g.transfers, to)
		g.inMu.Unlock()
		g.host.sched.enqueue(g, flagInput)
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("multiraft: group %d: leadership not transferred to %d: %w", g.id, to, ctx.Err())
		}
	}
}

// Leader returns the leader this member knows of (0 if none).
func (G *Group) Leader() NodeID { return NodeID(G.g.leader.Load()) }

// LeaderContact returns when this member last heard from the leader it
// knows: now on the leader itself, the zero time when it knows no leader
// or never heard from it.
func (G *Group) LeaderContact() time.Time {
	g := G.g
	lead := g.leader.Load()
	switch {
	case lead == 0:
		return time.Time{}
	case lead == uint64(g.host.cfg.NodeID):
		return time.Now()
	}
	ns := g.leaderContact.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Applied returns this member's applied index.
func (G *Group) Applied() uint64 { return G.g.applied.Load() }

// Commit returns the commit index this member knew at the end of its last
// round. Unlike Status, it takes no lock and copies nothing (for a read's
// staleness report, on every read).
func (G *Group) Commit() uint64 { return G.g.commit.Load() }

// WaitFor returns once cond (called after every change of leader or
// applied index) holds, or when ctx ends.
func (G *Group) WaitFor(ctx context.Context, cond func(*Group) bool) error {
	for {
		ch := G.g.watch()
		if cond(G) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WaitApplied returns once this member has applied index.
func (G *Group) WaitApplied(ctx context.Context, index uint64) error {
	return G.WaitFor(ctx, func(g *Group) bool { return g.Applied() >= index })
}

// Status describes one member of a group as it sees itself.
type Status struct {
	Group          GroupID
	Node           NodeID
	Role           string // "leader", "follower", "candidate", "pre-candidate" or "learner"
	Term           uint64
	Vote           NodeID
	Leader         NodeID
	Commit         uint64
	Applied        uint64
	FirstIndex     uint64
	LastIndex      uint64
	Voters         []NodeID
	Learners       []NodeID
	VotersOutgoing []NodeID
	LeadTransferee NodeID
	// SnapshotsRestored counts snapshots this member restored since the
	// group was opened here.
	SnapshotsRestored uint64
	// ReadIndexes counts the read index rounds this member asked raft for,
	// and LeaseReads the ReadIndex calls it answered under its lease
	// (Config.LeaseReads), since the group was opened here.
	ReadIndexes, LeaseReads uint64
	// ProposalBatches counts the batches of proposals this member handed
	// raft (one MsgProp each, "Proposal batching"), and Proposals the
	// proposals in them, since the group was opened here.
	ProposalBatches, Proposals uint64
	// LeaseRemaining is what is left of this leader's lease (0: none).
	LeaseRemaining time.Duration
	// Peers is filled on the leader only: its view of every member.
	Peers []PeerStatus
}

// PeerStatus is the leader's view of one member.
type PeerStatus struct {
	Node    NodeID
	Match   uint64
	Next    uint64
	State   string // "probe", "replicate" or "snapshot"
	Active  bool   // heard from within the last election timeout
	Learner bool
}

// Status returns the member's current status.
func (G *Group) Status() Status {
	g := G.g
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := g.rn.Status()
	st := Status{
		Group:          g.id,
		Node:           NodeID(rs.ID),
		Term:           rs.GetTerm(),
		Vote:           NodeID(rs.GetVote()),
		Leader:         NodeID(rs.Lead),
		Commit:         rs.GetCommit(),
		Applied:        g.store.applied.Index,
		FirstIndex:     g.store.truncated.Index + 1,
		LastIndex:      g.store.lastIndex,
		LeadTransferee: NodeID(rs.LeadTransferee),

		SnapshotsRestored: g.restored,
		ReadIndexes:       g.lease.readIndexes,
		LeaseReads:        g.lease.served,
		ProposalBatches:   g.batches,
		Proposals:         g.batched,
	}
	if rs.RaftState == raft.StateLeader && g.lease.term == rs.GetTerm() && rs.LeadTransferee == 0 {
		st.LeaseRemaining = max(0, g.lease.until-g.host.now())
	}
	for id := range rs.Config.Voters[0] {
		st.Voters = append(st.Voters, NodeID(id))
	}
	for id := range rs.Config.Voters[1] {
		st.VotersOutgoing = append(st.VotersOutgoing, NodeID(id))
	}
	for id := range rs.Config.Learners {
		st.Learners = append(st.Learners, NodeID(id))
	}
	slices.Sort(st.Voters)
	slices.Sort(st.VotersOutgoing)
	slices.Sort(st.Learners)
	st.Role = roleName(rs.RaftState)
	if rs.RaftState == raft.StateFollower && slices.Contains(st.Learners, st.Node) {
		st.Role = "learner"
	}
	for id, pr := range rs.Progress {
		st.Peers = append(st.Peers, peerStatus(id, pr))
	}
	slices.SortFunc(st.Peers, func(a, b PeerStatus) int { return int(a.Node) - int(b.Node) })
	return st
}

func peerStatus(id uint64, pr tracker.Progress) PeerStatus {
	return PeerStatus{
		Node: NodeID(id), Match: pr.Match, Next: pr.Next,
		State: pr.State.String(), Active: pr.RecentActive, Learner: pr.IsLearner,
	}
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	default:
		return "follower"
	}
}
