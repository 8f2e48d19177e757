package multiraft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"
)

// ErrOutcomeUnknown: the caller stopped waiting, or the proposal's entry was
// covered by a snapshot or replaced before it was committed, before the
// proposal's fate was known; it may or may not have been applied.
var ErrOutcomeUnknown = errors.New("multiraft: outcome unknown, the proposal may or may not be applied")

type appliedResult struct {
	id    uint64
	index uint64
	value any
}

// applyCommitted applies committed entries: runs of normal entries go to
// the state machine, conf changes to raft, and the applied state is
// written in the same batch as the state machine's writes.
func (g *group) applyCommitted(ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	if o := g.host.cfg.Observer; o != nil {
		defer func(start time.Time) { o.ObserveApply(g.id, time.Since(start)) }(time.Now())
	}
	b := g.host.db.NewIndexedBatch()
	defer b.Close()
	var (
		results []appliedResult
		run     []Entry
		runIDs  []uint64
		called  bool // the state machine's Apply wrote into b
	)
	if o, ok := g.sm.(ApplyObserver); ok {
		defer func() {
			if called {
				o.ApplyDone(false) // b was not committed (a success clears called)
			}
		}()
	}
	flush := func() error {
		if len(run) == 0 {
			return nil
		}
		called = true
		vals, err := g.sm.Apply(b, run)
		if err != nil {
			return fmt.Errorf("group %d: state machine apply [%d, %d]: %w", g.id, run[0].Index, run[len(run)-1].Index, err)
		}
		if len(vals) != len(run) {
			return fmt.Errorf("group %d: state machine returned %d results for %d entries", g.id, len(vals), len(run))
		}
		for i, e := range run {
			results = append(results, appliedResult{id: runIDs[i], index: e.Index, value: vals[i]})
		}
		run, runIDs = run[:0], runIDs[:0]
		return nil
	}
	cs := g.store.applied.ConfState
	var last logPosition
	var bytes uint64
	for _, e := range ents {
		last = logPosition{Index: e.GetIndex(), Term: e.GetTerm()}
		bytes += uint64(len(e.GetData()))
		switch e.GetType() {
		case raftpb.EntryType_EntryNormal:
			if len(e.GetData()) == 0 {
				results = append(results, appliedResult{index: last.Index}) // a new leader's empty entry
				continue
			}
			id, cmd, err := decodeProposal(e.GetData())
			if err != nil {
				return fmt.Errorf("group %d entry %d: %w", g.id, last.Index, err)
			}
			run = append(run, Entry{Index: last.Index, Term: last.Term, Cmd: cmd})
			runIDs = append(runIDs, id)
		case raftpb.EntryType_EntryConfChange, raftpb.EntryType_EntryConfChangeV2:
			if err := flush(); err != nil {
				return err
			}
			cc, id, err := decodeConfChange(e)
			if err != nil {
				return fmt.Errorf("group %d entry %d: %w", g.id, last.Index, err)
			}
			cs = g.rn.ApplyConfChange(cc)
			g.voidLease() // the quorum that confirmed it may be no quorum now (5)
			results = append(results, appliedResult{id: id, index: last.Index, value: proto.CloneOf(cs)})
			g.log.Info("configuration changed", "index", last.Index, "voters", cs.GetVoters(),
				"learners", cs.GetLearners(), "outgoing", cs.GetVotersOutgoing())
		default:
			return fmt.Errorf("%w: group %d entry %d: unknown type %v", ErrCorruptState, g.id, last.Index, e.GetType())
		}
	}
	if err := flush(); err != nil {
		return err
	}
	as := appliedState{logPosition: last, ConfState: cs}
	if err := g.store.stageApplied(b, as); err != nil {
		return err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("group %d: commit applied entries: %w", g.id, err)
	}
	g.store.applied = as
	g.store.sizes.applied(last.Index, bytes)
	if o, ok := g.sm.(ApplyObserver); ok && called {
		called = false
		o.ApplyDone(true)
	}
	g.deliver(results)
	return nil
}

func decodeConfChange(e *raftpb.Entry) (raftpb.ConfChangeI, uint64, error) {
	var ctx []byte
	var cc raftpb.ConfChangeI
	if e.GetType() == raftpb.EntryType_EntryConfChange {
		v1 := &raftpb.ConfChange{}
		if err := proto.Unmarshal(e.GetData(), v1); err != nil {
			return nil, 0, fmt.Errorf("%w: conf change: %w", ErrCorruptState, err)
		}
		cc, ctx = v1, v1.GetContext()
	} else {
		v2 := &raftpb.ConfChangeV2{}
		if err := proto.Unmarshal(e.GetData(), v2); err != nil {
			return nil, 0, fmt.Errorf("%w: conf change: %w", ErrCorruptState, err)
		}
		cc, ctx = v2, v2.GetContext()
	}
	var id uint64
	if len(ctx) == proposalIDLen {
		id = binary.BigEndian.Uint64(ctx)
	}
	return cc, id, nil
}

// entryID returns the proposal id carried by an entry (0 if none).
func entryID(e *raftpb.Entry) uint64 {
	switch e.GetType() {
	case raftpb.EntryType_EntryNormal:
		if id, _, err := decodeProposal(e.GetData()); err == nil {
			return id
		}
	default:
		if _, id, err := decodeConfChange(e); err == nil {
			return id
		}
	}
	return 0
}

// assignIndexes records where this host's proposals landed in the log. A
// proposal whose uncommitted entry is replaced by another one ends with
// ErrOutcomeUnknown: the replaced entry may still be committed (a member
// that holds it can win an election and replicate it again), so only its
// application, or another entry's at its index, decides.
func (g *group) assignIndexes(ents []*raftpb.Entry) {
	if len(ents) == 0 {
		return
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if len(g.waiters) == 0 && len(g.byIndex) == 0 {
		return
	}
	for _, e := range ents {
		idx := e.GetIndex()
		id := entryID(e)
		if old := g.byIndex[idx]; old != nil && old.id != id {
			g.supersede(old, fmt.Errorf("%w: group %d: uncommitted entry %d was replaced by another leader's entry", ErrOutcomeUnknown, g.id, idx))
		}
		if p := g.waiters[id]; id != 0 && p != nil {
			if p.index != 0 && p.index != idx && g.byIndex[p.index] == p {
				delete(g.byIndex, p.index)
			}
			p.index = idx
			g.byIndex[idx] = p
		}
	}
}

// supersede fails p, whose log position now holds another entry. Called
// with wmu held.
func (g *group) supersede(p *proposal, err error) {
	delete(g.waiters, p.id)
	delete(g.byIndex, p.index)
	p.done <- proposalResult{err: err}
}

// deliver hands applied entries' results to their waiters, if they are
// here (one lock for the whole run).
func (g *group) deliver(results []appliedResult) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if len(g.waiters) == 0 && len(g.byIndex) == 0 {
		return
	}
	for _, r := range results {
		if old := g.byIndex[r.index]; old != nil && old.id != r.id {
			// Another entry is committed at old's index: old never will be.
			g.supersede(old, fmt.Errorf("%w: group %d: entry %d was replaced by another leader's entry", ErrProposalDropped, g.id, r.index))
		}
		if r.id == 0 {
			continue
		}
		p := g.waiters[r.id]
		if p == nil {
			continue
		}
		delete(g.waiters, r.id)
		if g.byIndex[p.index] == p {
			delete(g.byIndex, p.index)
		}
		p.done <- proposalResult{value: r.value}
	}
}

// failCoveredWaiters fails waiters whose entries a snapshot replaced: they
// may have been applied as part of it, or not.
func (g *group) failCoveredWaiters(index uint64) {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	for i, p := range g.byIndex {
		if i <= index {
			delete(g.byIndex, i)
			delete(g.waiters, p.id)
			p.done <- proposalResult{err: fmt.Errorf("%w: group %d: entry %d was covered by a snapshot", ErrOutcomeUnknown, g.id, i)}
		}
	}
}

func (g *group) takeReadStates(rss []raft.ReadState) {
	for _, rs := range rss {
		if len(rs.RequestCtx) != 8 {
			continue
		}
		id := binary.BigEndian.Uint64(rs.RequestCtx)
		if r := g.pendingReads[id]; r != nil {
			delete(g.pendingReads, id)
			g.extendLease(r)
			r.index = g.readFloor(rs.Index)
			g.readyReads = append(g.readyReads, r)
			for _, x := range r.riders {
				x.index = r.index
				g.readyReads = append(g.readyReads, x)
			}
			r.riders = nil
		}
	}
}

// answerReads completes reads whose read index has been applied.
func (g *group) answerReads() {
	if len(g.readyReads) == 0 {
		return
	}
	applied := g.store.applied.Index
	keep := g.readyReads[:0]
	for _, r := range g.readyReads {
		if r.index <= applied {
			r.done <- nil
		} else {
			keep = append(keep, r)
		}
	}
	clear(g.readyReads[len(keep):])
	g.readyReads = keep
}

// maybeCompact truncates the log once enough of it has been applied
// (doc.go, "Log compaction"): by count, more than LogCompactionThreshold
// applied entries, keeping LogCompactionKeep; by bytes, on a leader,
// applied entries of more than LogCompactionBytes, keeping about
// LogCompactionKeepBytes of them and every entry a follower still lacks
// (until logBytesOverFollowers times LogCompactionBytes), and on a
// follower, which cannot see the others' progress and may lead next,
// applied entries of more than logBytesOverFollowers times
// LogCompactionBytes, keeping about LogCompactionBytes of them.
func (g *group) maybeCompact() error {
	cfg := &g.host.cfg
	applied := g.store.applied.Index
	var to uint64
	if applied > g.store.truncated.Index+cfg.LogCompactionThreshold {
		to = applied - cfg.LogCompactionKeep
	}
	if inLog := g.store.sizes.inLog(); inLog > cfg.LogCompactionBytes {
		most := logBytesOverFollowers * cfg.LogCompactionBytes
		switch leader := g.soft.RaftState == raft.StateLeader; {
		case leader:
			by := g.store.sizes.keepFrom(cfg.LogCompactionKeepBytes)
			if inLog <= most {
				by = min(by, g.followersHave(by))
			}
			to = max(to, by)
		case inLog > most:
			to = max(to, g.store.sizes.keepFrom(cfg.LogCompactionBytes))
		}
	}
	if to <= g.store.truncated.Index {
		return nil
	}
	term, err := g.store.Term(to)
	if err != nil {
		return fmt.Errorf("group %d: compaction: term of %d: %w", g.id, to, err)
	}
	pos := logPosition{Index: to, Term: term}
	b := g.host.db.NewBatch()
	defer b.Close()
	if err := g.store.stageTruncate(b, pos); err != nil {
		return err
	}
	// Not synced: the truncation is ordered after the applied state it
	// relies on, and Pebble recovers a prefix of its write-ahead log.
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("group %d: compaction: %w", g.id, err)
	}
	g.store.commitTruncate(pos)
	g.log.Debug("log compacted", "through", to)
	return nil
}

// logBytesOverFollowers: past this many times LogCompactionBytes of applied
// entries in its log, a leader truncates by bytes without waiting for its
// followers (one that still lacks the entries gets a snapshot), and a
// follower truncates by bytes at all.
const logBytesOverFollowers = 8

// followersHave is the highest index up to limit that every follower of
// this leader has in its log, up or down: a truncation through it sends
// no member a snapshot. A follower being sent a snapshot anyway does not
// hold the log back.
func (g *group) followersHave(limit uint64) uint64 {
	have := limit
	g.rn.WithProgress(func(_ uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.State != tracker.StateSnapshot {
			have = min(have, pr.Match)
		}
	})
	return have
}
