package multiraft

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// roundWork is one group's Ready within a round.
type roundWork struct {
	g      *group
	rd     raft.Ready
	leader bool
	marker *restoreMarker // set when the Ready carries a snapshot
}

// processRound is one pass of a worker over the groups it claimed. It is
// the ready loop of the package documentation, for many groups at once.
func (h *Host) processRound(gs []*group, fs []schedFlags) {
	again := make([]bool, len(gs))
	locked := make([]bool, len(gs))
	var work []roundWork
	var failed error
	// 1. Feed raft and take the Readies.
	for i, g := range gs {
		if g == nil {
			continue
		}
		g.mu.Lock()
		locked[i] = true
		if g.failure != nil || failed != nil {
			continue
		}
		rd, ok, err := g.feed(fs[i])
		if err != nil {
			failed = err
			continue
		}
		if ok {
			work = append(work, roundWork{g: g, rd: rd})
		}
	}
	switch {
	case failed != nil:
		h.fatal(failed)
	case len(work) > 0:
		if err := h.handleReadiesRecovering(work); err != nil {
			h.fatal(err)
		}
	}
	for i, g := range gs {
		if !locked[i] {
			continue
		}
		again[i] = g.failure == nil && h.failed() == nil && g.rn.HasReady()
		g.mu.Unlock()
	}
	h.sched.done(gs, again)
}

// feed hands raft what arrived and takes its Ready, if it has one. Raft
// panics when a message shows that this member lost log entries it had
// acknowledged (a truncated write-ahead log): feed returns that as an error.
func (g *group) feed(f schedFlags) (rd raft.Ready, ok bool, err error) {
	defer recoverRound(&err)
	g.handleInputs(f)
	if g.rn.HasReady() {
		return g.rn.Ready(), true, nil
	}
	return raft.Ready{}, false, nil
}

// handleInputs feeds raft what arrived since the last round.
func (g *group) handleInputs(f schedFlags) {
	g.inMu.Lock()
	inbox, confs, reads := g.inbox, g.confs, g.reads
	transfers, snapRep, unreach, campaign := g.transfers, g.snapRep, g.unreach, g.campaign
	g.inbox, g.confs, g.reads = nil, nil, nil
	g.transfers, g.snapRep, g.unreach, g.campaign = nil, nil, nil, false
	g.inMu.Unlock()

	var now time.Duration
	if len(inbox) > 0 {
		now = g.host.now()
	}
	for _, m := range inbox {
		if g.holdsVote(m, now) {
			continue
		}
		if m.GetType() == raftpb.MessageType_MsgSnap {
			g.spooled = append(g.spooled, string(m.GetSnapshot().GetData()))
		}
		if err := g.rn.Step(m); err != nil {
			g.log.Debug("raft refused message", "type", m.GetType().String(), "from", m.GetFrom(), "err", err)
			continue
		}
		switch m.GetType() {
		case raftpb.MessageType_MsgApp, raftpb.MessageType_MsgHeartbeat, raftpb.MessageType_MsgSnap:
			g.heardLeader(now)
			if m.GetFrom() == g.leader.Load() {
				g.leaderContact.Store(time.Now().UnixNano())
			}
		}
	}
	for _, r := range snapRep {
		g.rn.ReportSnapshot(uint64(r.to), r.status)
	}
	for _, n := range unreach {
		g.rn.ReportUnreachable(uint64(n))
	}
	if campaign {
		if err := g.rn.Campaign(); err != nil {
			g.log.Debug("campaign refused", "err", err)
		}
	}
	g.proposeAll(g.takeProposals(f))
	for _, p := range confs {
		if err := g.rn.ProposeConfChange(p.cc); err != nil {
			g.complete(p, proposalResult{err: fmt.Errorf("%w: group %d: conf change: %w", ErrProposalDropped, g.id, err)})
		}
	}
	if len(reads) > 0 {
		if index, ok := g.leaseIndex(); ok {
			// Under a lease the commit index is the read index.
			for _, r := range reads {
				r.index = index
			}
			g.lease.served += uint64(len(reads))
			g.readyReads = append(g.readyReads, reads...)
			g.answerReads() // those applied already: this round may have no Ready
		} else {
			// One read index for every read of the round: any index raft
			// confirms now is one they may all wait for.
			lead := reads[0]
			lead.riders = append(lead.riders, reads[1:]...)
			g.sendReadIndex(lead)
		}
	}
	for _, to := range transfers {
		g.rn.TransferLeader(uint64(to))
	}
	if f&flagTick != 0 {
		g.rn.Tick()
		g.retryReads()
	}
}

// takeProposals returns the queued proposals to append in this round:
// all of them, or none while a leader holds them back until what it
// appended before is committed ("Proposal batching" in the package
// documentation). It runs after the round's messages are stepped, so a
// commit they bring releases the proposals in the same round.
func (g *group) takeProposals(f schedFlags) []*proposal {
	var hold bool
	if !g.host.cfg.DisableProposalBatching && f&flagTick == 0 { // (3) a tick takes them whatever is in flight
		st := g.rn.BasicStatus()                   // the role as of the messages just stepped
		hold = st.RaftState == raft.StateLeader && // (1)
			len(g.store.applied.ConfState.GetVoters()) > 1 &&
			st.GetCommit() < g.batchEnd // (2) its last batch is in flight
	}
	g.inMu.Lock()
	defer g.inMu.Unlock()
	if hold && !g.heldEnough() { // (4)
		g.holding = true
		return nil
	}
	props := g.props
	g.props, g.propBytes, g.holding = nil, 0, false
	return props
}

// proposeAll hands raft the proposals in as few messages as MaxSizePerMsg
// allows: raft appends the entries of one MsgProp together and sends each
// follower one MsgApp for them (a Propose each would be an append and a
// MsgApp per follower each, and an answer to each). batchEnd becomes the
// index of the last entry of this round's Ready (handleReadies, 5), for
// takeProposals.
func (g *group) proposeAll(props []*proposal) {
	for len(props) > 0 {
		n, size := 0, uint64(0)
		for n < len(props) && (n == 0 || size+uint64(len(props[n].data)) <= g.host.cfg.MaxSizePerMsg) {
			size += uint64(len(props[n].data))
			n++
		}
		batch := props[:n]
		props = props[n:]
		ents := make([]*raftpb.Entry, n)
		for i, p := range batch {
			ents[i] = &raftpb.Entry{Data: p.data}
		}
		err := g.rn.Step(&raftpb.Message{Type: raftpb.MessageType_MsgProp.Enum(), From: new(uint64(g.host.cfg.NodeID)), Entries: ents})
		if err != nil {
			for _, p := range batch {
				g.complete(p, proposalResult{err: fmt.Errorf("%w: group %d: %w", ErrProposalDropped, g.id, err)})
			}
			continue
		}
		g.released = true
		g.batches++
		g.batched += uint64(n)
	}
}

// maxHeldProposals is how many proposals a leader holds back at most
// ("Proposal batching", 4).
const maxHeldProposals = 256

// heldEnough reports whether the queued proposals are enough to append
// without waiting any longer. Called with inMu held.
func (g *group) heldEnough() bool {
	return len(g.props) >= maxHeldProposals || uint64(g.propBytes) >= g.host.cfg.MaxSizePerMsg
}

// retryReads re-sends read requests that got no answer for an election
// timeout (raft drops them silently while there is no leader) and gives up
// on those that waited for ten.
func (g *group) retryReads() {
	et := g.host.cfg.ElectionTicks
	for id, r := range g.pendingReads {
		r.ticks++
		switch {
		case r.ticks >= 10*et:
			delete(g.pendingReads, id)
			r.finish(fmt.Errorf("multiraft: group %d: read index: no answer from a leader for %d ticks", g.id, r.ticks))
		case r.ticks%et == 0:
			g.rn.ReadIndex(readCtx(id))
		}
	}
}

func readCtx(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// handleReadiesRecovering is handleReadies with Pebble's fatal failure (a
// panic, from any write of the round: the engine's or a state machine's)
// and raft's panics at a corrupt log returned as errors (recoverRound).
func (h *Host) handleReadiesRecovering(work []roundWork) (err error) {
	defer recoverRound(&err)
	return h.handleReadies(work)
}

// handleReadies persists, sends and applies the Readies of one round, in
// the order the package documentation states.
func (h *Host) handleReadies(work []roundWork) error {
	t := roundTimer{start: time.Now()}
	defer t.report(h, work)
	// 2. A leader may send before its own entries are durable.
	for i := range work {
		w := &work[i]
		if w.rd.SoftState != nil {
			w.g.soft = *w.rd.SoftState
			if w.g.soft.RaftState == raft.StateLeader {
				w.g.noteTermStart(w.rd.Entries)
				w.g.batchEnd = 0 // nothing of this term in flight yet
			}
		}
		w.leader = w.g.soft.RaftState == raft.StateLeader
		if w.leader {
			if err := h.send(w.g, w.rd.Messages); err != nil {
				return err
			}
		}
	}

	// 3. A leader applies the committed entries already durable in its log
	// now, without waiting for this round's fsync (which only concerns newer
	// entries). The rest are applied after it; a follower's all are, once
	// it has sent its acknowledgements (step 6).
	for i := range work {
		w := &work[i]
		if s := w.rd.Snapshot; (s != nil && !raft.IsEmptySnap(s)) || !w.leader {
			continue
		}
		// Durable means: stored by an earlier round, and not about to be
		// replaced by this Ready's entries (a conflicting suffix).
		durable := w.g.store.lastIndex
		if len(w.rd.Entries) > 0 {
			durable = min(durable, w.rd.Entries[0].GetIndex()-1)
		}
		ents := w.rd.CommittedEntries
		n := 0
		for n < len(ents) && ents[n].GetIndex() <= durable {
			n++
		}
		if err := t.apply(w.g, ents[:n]); err != nil {
			return err
		}
		w.rd.CommittedEntries = ents[n:]
	}

	// 4. One batch, one fsync, for every group of the round.
	b := h.db.NewBatch()
	defer b.Close()
	sync := false
	for i := range work {
		w := &work[i]
		if s := w.rd.Snapshot; s != nil && !raft.IsEmptySnap(s) {
			m, err := w.g.stageSnapshot(b, s)
			if err != nil {
				return err
			}
			w.marker = &m
			sync = true
		}
		if err := w.g.store.stageAppend(b, w.rd.Entries); err != nil {
			return err
		}
		if hs := w.rd.HardState; hs != nil && !raft.IsEmptyHardState(hs) {
			if err := w.g.store.stageHardState(b, hs); err != nil {
				return err
			}
		}
		sync = sync || w.rd.MustSync
	}
	if err := h.cfg.Failpoints.Eval(FailpointBeforeSave); err != nil {
		return err
	}
	if !b.Empty() {
		opts := pebble.NoSync
		if sync {
			opts = pebble.Sync
		}
		start, size := time.Now(), b.Len()
		if err := b.Commit(opts); err != nil {
			return fmt.Errorf("persist raft state: %w", err)
		}
		t.persist, t.persistBytes, t.synced = time.Since(start), size, sync
		if o := h.cfg.Observer; o != nil {
			o.ObservePersist(t.persist, sync, size)
		}
	}
	if err := h.cfg.Failpoints.Eval(FailpointAfterSave); err != nil {
		return err
	}

	// 5. The durable state becomes what raft's Storage serves.
	for i := range work {
		w := &work[i]
		if w.marker != nil {
			w.g.store.resetToSnapshot(w.marker.logPosition)
			w.g.failCoveredWaiters(w.marker.Index)
		}
		w.g.store.commitAppend(w.rd.Entries)
		w.g.assignIndexes(w.rd.Entries)
		if w.g.released {
			if n := len(w.rd.Entries); n > 0 && w.leader {
				w.g.batchEnd = w.rd.Entries[n-1].GetIndex()
			}
			w.g.released = false
		}
	}

	// 6. Followers (and candidates) send only after their state is durable.
	for i := range work {
		if w := &work[i]; !w.leader {
			if err := h.send(w.g, w.rd.Messages); err != nil {
				return err
			}
		}
	}

	// 7. Restore snapshots, apply the remaining committed entries, answer reads, advance.
	for i := range work {
		w := &work[i]
		if w.marker != nil {
			if err := h.cfg.Failpoints.Eval(FailpointBeforeApplySnapshot); err != nil {
				return err
			}
			if err := w.g.restore(*w.marker); err != nil {
				return err
			}
		}
		if err := t.apply(w.g, w.rd.CommittedEntries); err != nil {
			return err
		}
		w.g.takeReadStates(w.rd.ReadStates)
		w.g.answerReads()
		w.g.rn.Advance(w.rd)
		if err := w.g.maybeCompact(); err != nil {
			return err
		}
		w.g.deleteSpooled()
		w.g.publish()
	}
	return nil
}

// send hands messages to the transport; snapshots go to the snapshot sender.
func (h *Host) send(g *group, msgs []*raftpb.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := h.cfg.Failpoints.Eval(FailpointBeforeSend); err != nil {
		return err
	}
	out := make([]OutboundMessage, 0, len(msgs))
	for _, m := range msgs {
		g.noteOutgoing(m)
		if m.GetType() == raftpb.MessageType_MsgSnap {
			h.snaps.send(g, m)
			continue
		}
		out = append(out, OutboundMessage{Group: g.id, Msg: m})
	}
	if len(out) > 0 {
		h.cfg.Transport.Send(out)
	}
	return nil
}

// publish makes the group's progress visible to waiters (called with g.mu
// held, at the end of the group's round).
func (g *group) publish() {
	g.commit.Store(g.rn.BasicStatus().GetCommit())
	changed := false
	if a := g.store.applied.Index; g.applied.Load() != a {
		g.applied.Store(a)
		changed = true
	}
	if l := g.soft.Lead; g.leader.Load() != l {
		g.leader.Store(l)
		changed = true
	}
	if changed {
		g.changed()
	}
}

// Rounds that take longer than these are logged with where their time
// went (the persist, each group's apply): at debug from SlowRoundDebug, at
// warn from SlowRound. A write waits for at least one round on the leader
// and one on a follower, so a slow round is a slow write.
const (
	SlowRoundDebug = 100 * time.Millisecond
	SlowRound      = time.Second
)

// roundTimer notes what a round's durable steps took, for the slow-round log.
type roundTimer struct {
	start        time.Time
	persist      time.Duration
	persistBytes int
	synced       bool
	applied      int           // entries
	appliedBytes int           // their data
	applying     time.Duration // all groups, steps 3 and 7
}

// apply applies a group's committed entries and notes what it took.
func (t *roundTimer) apply(g *group, ents []*raftpb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	start := time.Now()
	err := g.applyCommitted(ents)
	t.applying += time.Since(start)
	t.applied += len(ents)
	for _, e := range ents {
		t.appliedBytes += len(e.GetData())
	}
	return err
}

// report logs the round if it was slow.
func (t *roundTimer) report(h *Host, work []roundWork) {
	took := time.Since(t.start)
	if took < SlowRoundDebug {
		return
	}
	level := slog.LevelDebug
	if took >= SlowRound {
		level = slog.LevelWarn
	}
	appended, appendedBytes := 0, 0
	for _, w := range work {
		appended += len(w.rd.Entries)
		for _, e := range w.rd.Entries {
			appendedBytes += len(e.GetData())
		}
	}
	h.log.Log(context.Background(), level, "slow raft round", "took", took, "groups", len(work),
		"appended", appended, "appended_bytes", appendedBytes,
		"persist", t.persist, "persist_bytes", t.persistBytes, "synced", t.synced,
		"applied", t.applied, "applied_bytes", t.appliedBytes, "applying", t.applying,
		"other", took-t.persist-t.applying)
}
