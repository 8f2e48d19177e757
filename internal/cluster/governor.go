package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/retry"
)

// The governor (K12) runs on the leader of group 0. Each iteration it looks
// at group 0's state and does the first activity that applies, in this
// order, then looks again:
//
//	0. sentinel: an instance not heard from for --auto-offline-timeout gets target Offline;
//	1. group 0's voters and learners (conf_change.go);
//	2. an instance whose target is Offline or Expelled is taken down (downgrade.go);
//	3. target Online, current Offline or of an older incarnation: RaftSynced once its log caught up;
//	4. RaftSynced: added to its replicaset's group and caught up there: Replicated;
//	5. Replicated: sharding configuration pushed (buckets bootstrapped once): ShardingInitialized;
//	6. ShardingInitialized: full replicasets get weight, configuration pushed again: Online.
//
// An activity that fails is logged and recomputed on the next iteration:
// nothing is remembered between iterations but what group 0 records.

type governor struct {
	n        *Node
	log      *slog.Logger
	term     uint64
	lastSeen map[uint64]time.Time
	// leadersChecked is when replicaset leaders were last looked up.
	leadersChecked time.Time
	// leaderReported are the replicasets whose members reported a new
	// leader since the governor last looked (ReportReplicasetLeader), each
	// with the raft id that reported: looked up at its next step, asking
	// that member first, whatever leadersChecked says.
	leaderReported map[string]uint64
}

func newGovernor(n *Node) *governor {
	return &governor{n: n, log: n.log.With("component", "governor"), lastSeen: map[uint64]time.Time{}, leaderReported: map[string]uint64{}}
}

// errWaiting: the activity is under way but cannot complete yet.
var errWaiting = errors.New("waiting")

func (gv *governor) run(ctx context.Context) {
	backoff := retry.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for ctx.Err() == nil {
		g0 := gv.n.g0.Load()
		self := multiraft.NodeID(gv.n.Identity().RaftID)
		if g0.Leader() != self {
			gv.term = 0
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			_ = g0.WaitFor(wctx, func(g *multiraft.Group) bool { return g.Leader() == self })
			cancel()
			continue
		}
		if st := g0.Status(); st.Term != gv.term || st.Role != "leader" {
			// New leadership: make sure the state is current before acting.
			rctx, cancel := context.WithTimeout(ctx, gv.n.cfg.Timeouts.Activity)
			err := g0.ReadIndex(rctx)
			cancel()
			if err != nil || st.Role != "leader" {
				continue
			}
			gv.term = st.Term
			gv.lastSeen = map[uint64]time.Time{}
			gv.log.Info("governing the cluster", "term", st.Term)
		}
		changed := gv.n.meta.Changed()
		gv.takeLeaderReports()
		start := gv.n.clock.Now()
		step, err := gv.step(ctx)
		if gv.n.metrics != nil && step != "" {
			gv.n.metrics.governorStep(step, gv.n.clock.Now().Sub(start), err)
		}
		switch {
		case err == nil && step != "":
			backoff.Reset()
			continue
		case err != nil && !errors.Is(err, errWaiting):
			gv.log.Warn("governor activity failed; will retry", "step", step, "err", err)
			_ = retry.Sleep(ctx, backoff.Next()) // the loop ends with ctx
			continue
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case r := <-gv.n.leaderReports:
			gv.leaderReported[r.replicasetID] = r.raftID
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// step does one activity; it returns its name ("" when there was nothing
// to do) and its outcome.
func (gv *governor) step(ctx context.Context) (string, error) {
	n := gv.n
	st := n.meta.State()
	if !st.Booted() {
		return "", nil
	}
	g0 := n.g0.Load()
	gs := g0.Status()
	gv.observe(st, gs)
	actx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.Activity)
	defer cancel()

	if inst := gv.silent(st); inst != nil {
		return "sentinel", gv.setTarget(actx, inst, meta.Offline, fmt.Sprintf("sentinel: no answer for %v", n.cfg.AutoOfflineTimeout))
	}
	if cc := planConfChange(st, gs); cc != nil {
		gv.log.Info("changing group 0's configuration", "change", cc.String())
		_, err := g0.ChangeConfig(actx, cc)
		return "conf_change", err
	}
	insts := st.SortedInstances()
	// A downgrade that must wait or keeps failing (an expelled leader with
	// no successor yet; a replicaset group without quorum) must not hold
	// up the instances going Online: one of them may be the successor.
	var waiting, downErr error
	for _, inst := range insts {
		cur, tgt := inst.GetCurrentGrade(), inst.GetTargetGrade()
		if (tgt.GetVariant() == meta.Offline || tgt.GetVariant() == meta.Expelled) && cur.GetVariant() != tgt.GetVariant() {
			err := gv.downgrade(actx, st, gs, inst)
			switch {
			case err == nil:
				return "downgrade", nil
			case errors.Is(err, errWaiting):
				waiting = err
			case downErr == nil:
				downErr = err
			}
		}
	}
	for _, inst := range insts {
		cur, tgt := inst.GetCurrentGrade(), inst.GetTargetGrade()
		if tgt.GetVariant() != meta.Online {
			continue
		}
		if cur.GetVariant() == meta.Offline || cur.GetIncarnation() < tgt.GetIncarnation() {
			err := gv.raftSync(actx, gs, inst)
			if !errors.Is(err, errWaiting) {
				return "raft_sync", err
			}
			waiting = err
		}
	}
	for _, inst := range insts {
		cur, tgt := inst.GetCurrentGrade(), inst.GetTargetGrade()
		if tgt.GetVariant() != meta.Online || cur.GetIncarnation() != tgt.GetIncarnation() {
			continue
		}
		var err error
		var step string
		switch cur.GetVariant() {
		case meta.RaftSynced:
			step, err = "replication", gv.replicate(actx, st, inst)
		case meta.Replicated:
			step, err = "sharding_init", gv.shardingInit(actx, st, inst)
		case meta.ShardingInitialized:
			step, err = "to_online", gv.toOnline(actx, st, inst)
		default:
			continue
		}
		if !errors.Is(err, errWaiting) {
			return step, err
		}
		waiting = err
	}
	if err := gv.recordReplicasetLeaders(actx, st); err != nil {
		return "replicaset_leaders", err
	}
	if downErr != nil {
		return "downgrade", downErr
	}
	if waiting != nil {
		return "", waiting
	}
	return "", nil
}

func (gv *governor) setTarget(ctx context.Context, inst *metapb.Instance, v metapb.GradeVariant, reason string) error {
	gv.log.Info("setting target grade", "instance", inst.GetInstanceId(), "target", meta.VariantName(v), "reason", reason)
	_, err := gv.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{
		InstanceId: inst.GetInstanceId(), Variant: v, Reason: reason}}})
	return err
}

// setCurrent records a new current grade, valid only while the target is
// still the one this decision was made for.
func (gv *governor) setCurrent(ctx context.Context, inst *metapb.Instance, v metapb.GradeVariant) error {
	_, err := gv.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetCurrentGrade{SetCurrentGrade: &metapb.SetCurrentGrade{
		InstanceId: inst.GetInstanceId(), Variant: v, ExpectedTarget: inst.GetTargetGrade()}}})
	if err == nil {
		// Logged once applied: a proposal that never commits (the others
		// stopped meanwhile) changed nothing.
		gv.log.Info("current grade", "instance", inst.GetInstanceId(), "from", meta.FormatGrade(inst.GetCurrentGrade()),
			"to", fmt.Sprintf("%s(%d)", meta.VariantName(v), inst.GetTargetGrade().GetIncarnation()))
	}
	return err
}

// observe records which instances the leader has heard from.
func (gv *governor) observe(st *meta.State, gs multiraft.Status) {
	now := gv.n.clock.Now()
	for _, inst := range st.Instances {
		if _, ok := gv.lastSeen[inst.GetRaftId()]; !ok {
			gv.lastSeen[inst.GetRaftId()] = now // a new leader gives everyone a full timeout
		}
	}
	for _, p := range gs.Peers {
		if p.Active || p.Node == gs.Node {
			gv.lastSeen[uint64(p.Node)] = now
		}
	}
}

// silent returns an instance that should be Online but has not answered
// for the auto-offline timeout (the sentinel).
func (gv *governor) silent(st *meta.State) *metapb.Instance {
	self := gv.n.Identity().RaftID
	for _, inst := range st.SortedInstances() {
		if inst.GetRaftId() == self || inst.GetTargetGrade().GetVariant() != meta.Online || meta.IsExpelled(inst) {
			continue
		}
		if seen, ok := gv.lastSeen[inst.GetRaftId()]; ok && gv.n.clock.Now().Sub(seen) > gv.n.cfg.AutoOfflineTimeout {
			return inst
		}
	}
	return nil
}

// raftSync is step 3: RaftSynced once the instance's log has everything the
// leader has committed.
func (gv *governor) raftSync(ctx context.Context, gs multiraft.Status, inst *metapb.Instance) error {
	if inst.GetRaftId() != uint64(gs.Node) {
		var match uint64
		found := false
		for _, p := range gs.Peers {
			if uint64(p.Node) == inst.GetRaftId() {
				match, found = p.Match, true
			}
		}
		if !found || match < gs.Commit {
			return fmt.Errorf("%w: %s has log index %d of %d", errWaiting, inst.GetInstanceId(), match, gs.Commit)
		}
	}
	return gv.setCurrent(ctx, inst, meta.RaftSynced)
}

func largestOdd(n int) int {
	if n < 1 {
		return 1
	}
	if n%2 == 0 {
		return n - 1
	}
	return n
}

func containsNode(xs []multiraft.NodeID, id uint64) bool {
	return slices.Contains(xs, multiraft.NodeID(id))
}
