package multiraft

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// A new group's log starts after a fixed position, identical on every
// initial member, so that any member added later starts from a snapshot.
const (
	initialIndex = 10
	initialTerm  = 5
)

// GroupConfig describes a group to open on a host.
type GroupConfig struct {
	ID GroupID
	// Members are the initial voters, used only when this host has no state
	// for the group yet. Every initial member must be given the same set.
	// Leave it empty on a host that joins an existing group (after the group
	// added it with a conf change): it then waits for the leader, which
	// brings it up to date with a snapshot.
	Members []NodeID
	// StateMachine is the group's replicated state. Required.
	StateMachine StateMachine
}

// group is the engine's state for one Raft group on this host.
type group struct {
	id   GroupID
	host *Host
	sm   StateMachine
	log  *slog.Logger

	sched schedState // guarded by host.sched.mu

	// Inputs from other goroutines, guarded by inMu.
	inMu      sync.Mutex
	inbox     []*raftpb.Message
	props     []*proposal
	propBytes int  // the size of props' commands
	holding   bool // the worker holds props back ("Proposal batching"): a new one need not wake it
	confs     []*proposal
	reads     []*readRequest
	transfers []NodeID
	snapRep   []snapReport
	unreach   []NodeID
	campaign  bool
	closedErr error // set when the group stopped: nothing is queued any more

	// Raft state, guarded by mu: the worker holds it for a whole round.
	mu           sync.Mutex
	rn           *raft.RawNode
	batchEnd     uint64 // the last entry of the proposals this member appended last ("Proposal batching", 2)
	released     bool   // this round handed raft proposals (proposeAll)
	batches      uint64 // Status.ProposalBatches
	batched      uint64 // Status.Proposals
	store        *logStore
	soft         raft.SoftState
	pendingReads map[uint64]*readRequest // sent to raft, no read state yet
	readyReads   []*readRequest          // read index known, waiting for apply
	spooled      []string                // snapshot spool files stepped into raft
	restored     uint64                  // snapshots restored since the group was opened
	failure      error                   // set when the group stopped for good
	lease        leaseState              // lease.go
	// votesFrom is when (Config.Clock) this member may answer vote
	// requests again (lease.go, holdsVote).
	votesFrom time.Duration
	// termStart is, while this member leads, the index of its term's
	// first entry: no read is answered below it (readFloor).
	termStart uint64

	// Waiters for proposals, guarded by wmu (not mu, so that a caller whose
	// context ends can leave without waiting for a round).
	wmu     sync.Mutex
	waiters map[uint64]*proposal
	byIndex map[uint64]*proposal

	// Observable progress, for waiting without the group lock.
	applied atomic.Uint64
	leader  atomic.Uint64
	commit  atomic.Uint64 // raft's commit index at the end of the last round (no notification)
	// leaderContact is when (Unix ns) this member last heard from the
	// leader it knows (a heartbeat, an append or a snapshot).
	leaderContact atomic.Int64
	notifyM       sync.Mutex
	notify        chan struct{} // closed and replaced on every change of the above

	ccSem chan struct{} // one conf change at a time through this host
}

type proposal struct {
	id    uint64
	data  []byte               // for normal proposals
	cc    *raftpb.ConfChangeV2 // for conf changes
	index uint64               // log index, once known (guarded by wmu)
	done  chan proposalResult  // buffered, receives exactly one result
}

type proposalResult struct {
	value any
	err   error
}

type readRequest struct {
	id    uint64
	index uint64
	ticks int
	done  chan error // buffered
	// sentAt, term and epoch are set when a leader asks raft for this
	// read index with lease reads on: the answer extends its lease.
	sentAt time.Duration
	term   uint64
	epoch  uint64
	// riders are reads queued in the same round, answered by this one's
	// read index (one heartbeat round serves them all).
	riders []*readRequest
}

// finish completes the read and its riders with err.
func (r *readRequest) finish(err error) {
	r.done <- err
	for _, x := range r.riders {
		x.done <- err
	}
}

type snapReport struct {
	to     NodeID
	status raft.SnapshotStatus
}

// OpenGroup opens (creating if needed) a group on this host and schedules it.
func (h *Host) OpenGroup(gc GroupConfig) (*Group, error) {
	if gc.StateMachine == nil {
		return nil, fmt.Errorf("multiraft: group %d: no state machine", gc.ID)
	}
	if err := h.failed(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	if _, ok := h.groups[gc.ID]; ok {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: group %d", ErrGroupExists, gc.ID)
	}
	// Reserve the id while opening, so a concurrent OpenGroup fails.
	h.groups[gc.ID] = nil
	h.mu.Unlock()

	g, err := h.openGroup(gc)
	h.mu.Lock()
	if err != nil {
		delete(h.groups, gc.ID)
		h.mu.Unlock()
		h.fatalIfPebbleFailed(err)
		return nil, err
	}
	h.groups[gc.ID] = g
	h.mu.Unlock()
	h.sched.enqueue(g, flagReady)
	return &Group{g: g}, nil
}

// openGroup loads (or bootstraps) the group and finishes an interrupted
// restore; a Pebble fatal failure in any of it, or raft's panic at a
// stored state it cannot start from, is returned as an error.
func (h *Host) openGroup(gc GroupConfig) (_ *group, err error) {
	defer recoverRound(&err)
	g := &group{
		id:           gc.ID,
		host:         h,
		sm:           gc.StateMachine,
		log:          h.log.With("group", uint64(gc.ID)),
		store:        newLogStore(h.db, gc.ID, h.cfg.EntryCacheBytes, h.sideloadStore(gc.ID)),
		pendingReads: make(map[uint64]*readRequest),
		waiters:      make(map[uint64]*proposal),
		byIndex:      make(map[uint64]*proposal),
		notify:       make(chan struct{}),
		ccSem:        make(chan struct{}, 1),
	}
	found, err := g.store.load()
	if err != nil {
		return nil, err
	}
	if found || len(gc.Members) == 0 {
		// A restart (or a joiner, which knows no better) may have promised
		// a leader its vote; a fresh bootstrap promised nobody anything.
		g.heardLeader(h.now())
	}
	if !found && len(gc.Members) > 0 {
		if err := g.bootstrap(gc.Members); err != nil {
			return nil, err
		}
	}
	if err := g.finishInterruptedRestore(); err != nil {
		return nil, err
	}
	g.removeStaleSpoolFiles()
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        uint64(h.cfg.NodeID),
		ElectionTick:              h.cfg.ElectionTicks,
		HeartbeatTick:             h.cfg.HeartbeatTicks,
		Storage:                   g.store,
		Applied:                   g.store.applied.Index,
		MaxSizePerMsg:             h.cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  4 * h.cfg.MaxSizePerMsg,
		MaxUncommittedEntriesSize: h.cfg.MaxUncommittedBytes,
		MaxInflightMsgs:           h.cfg.MaxInflightMsgs,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		Logger:                    newRaftLogger(g.log, gc.ID),
	})
	if err != nil {
		return nil, fmt.Errorf("multiraft: group %d: %w", gc.ID, err)
	}
	g.rn = rn
	g.applied.Store(g.store.applied.Index)
	g.commit.Store(rn.BasicStatus().GetCommit())
	cs := g.store.applied.ConfState
	if len(cs.GetVoters()) == 1 && cs.GetVoters()[0] == uint64(h.cfg.NodeID) && len(cs.GetVotersOutgoing()) == 0 {
		g.campaign = true // sole voter: no need to wait for an election timeout
	}
	return g, nil
}

// bootstrap writes the initial state of a new group: its members as voters
// and a log that starts after initialIndex, the same on every member.
func (g *group) bootstrap(members []NodeID) error {
	voters := make([]uint64, 0, len(members))
	for _, m := range members {
		if m == 0 {
			return fmt.Errorf("multiraft: group %d: member id 0", g.id)
		}
		voters = append(voters, uint64(m))
	}
	slices.Sort(voters)
	voters = slices.Compact(voters)
	pos := logPosition{Index: initialIndex, Term: initialTerm}
	as := appliedState{logPosition: pos, ConfState: &raftpb.ConfState{Voters: voters}}
	hs := &raftpb.HardState{Term: new(uint64(initialTerm)), Vote: new(uint64(0)), Commit: new(uint64(initialIndex))}
	b := g.host.db.NewBatch()
	defer b.Close()
	if err := g.store.stageHardState(b, hs); err != nil {
		return err
	}
	if err := g.store.stageApplied(b, as); err != nil {
		return err
	}
	if err := b.Set(groupKey(g.id, suffixTruncated), encodePosition(pos), nil); err != nil {
		return err
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("multiraft: group %d: bootstrap: %w", g.id, err)
	}
	g.store.hardState = hs
	g.store.applied = as
	g.store.truncated = pos
	g.store.lastIndex = pos.Index
	return nil
}

func (g *group) changed() {
	g.notifyM.Lock()
	close(g.notify)
	g.notify = make(chan struct{})
	g.notifyM.Unlock()
}

func (g *group) watch() <-chan struct{} {
	g.notifyM.Lock()
	defer g.notifyM.Unlock()
	return g.notify
}

// stop fails everything waiting on the group, and every call made on it
// from now on. The host calls it on Stop, RemoveGroup and a fatal failure.
// It waits for a round in progress (which holds g.mu).
func (g *group) stop(err error) {
	// Close the inputs first: a call that registers its waiter after
	// failWaiters below has run finds closedErr when it queues.
	g.inMu.Lock()
	if g.closedErr == nil {
		g.closedErr = err
	}
	err = g.closedErr
	reads := g.reads
	g.inbox, g.reads = nil, nil
	g.inMu.Unlock()
	for _, r := range reads {
		r.done <- err
	}
	g.mu.Lock()
	if g.failure == nil {
		g.failure = err
	}
	for _, r := range g.pendingReads {
		r.finish(err)
	}
	for _, r := range g.readyReads {
		r.done <- err
	}
	g.pendingReads, g.readyReads = map[uint64]*readRequest{}, nil
	g.mu.Unlock()
	g.failWaiters(err)
	g.changed()
}

// closed returns the error the group stopped with, if it did.
func (g *group) closed() error {
	g.inMu.Lock()
	defer g.inMu.Unlock()
	return g.closedErr
}

func (g *group) failWaiters(err error) {
	g.inMu.Lock()
	g.props, g.propBytes, g.holding, g.confs = nil, 0, false, nil
	g.inMu.Unlock()
	g.wmu.Lock()
	for id, p := range g.waiters {
		p.done <- proposalResult{err: err}
		delete(g.waiters, id)
	}
	clear(g.byIndex)
	g.wmu.Unlock()
}

// register makes p a waiter; every proposal is registered before it is
// handed to the worker, and completed exactly once through complete.
func (g *group) register(p *proposal) {
	g.wmu.Lock()
	g.waiters[p.id] = p
	g.wmu.Unlock()
}

// complete hands p its result unless it already has one.
func (g *group) complete(p *proposal, res proposalResult) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.waiters[p.id] != p {
		return
	}
	delete(g.waiters, p.id)
	if p.index != 0 && g.byIndex[p.index] == p {
		delete(g.byIndex, p.index)
	}
	p.done <- res
}

// abandon forgets p after its caller stopped waiting.
func (g *group) abandon(p *proposal) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if g.waiters[p.id] == p {
		delete(g.waiters, p.id)
		if p.index != 0 && g.byIndex[p.index] == p {
			delete(g.byIndex, p.index)
		}
	}
}
