package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// replicate is governor step 4: the instance becomes a member of its
// replicaset's group and catches up with it (it has applied a barrier the
// group's leader appended after adding it); then Replicated.
func (gv *governor) replicate(ctx context.Context, st *meta.State, inst *metapb.Instance) error {
	rs := st.Replicasets[inst.GetReplicasetId()]
	if rs == nil {
		return fmt.Errorf("instance %s: no replicaset %q", inst.GetInstanceId(), inst.GetReplicasetId())
	}
	gid := rs.GetRaftGroupId()
	var index uint64
	if rs.GetBootstrapInstanceId() == inst.GetInstanceId() && len(st.Members(rs.GetReplicasetId())) == 1 {
		// The group's first member creates it; wait until it leads it.
		p, err := gv.progress(ctx, inst)
		if err != nil {
			return err
		}
		if p.GetLeaders()[gid] == 0 {
			return fmt.Errorf("%w: replicaset group %d of %s has no leader yet", errWaiting, gid, inst.GetInstanceId())
		}
	}
	resp, err := gv.rsAdmin(ctx, st, rs, clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_BARRIER, 0)
	if err != nil {
		return fmt.Errorf("replicaset %s: %w", rs.GetReplicasetId(), err)
	}
	if !slices.Contains(resp.GetVoters(), inst.GetRaftId()) {
		gv.log.Info("adding instance to its replicaset's group", "instance", inst.GetInstanceId(), "replicaset", rs.GetReplicasetId())
		if _, err := gv.rsAdmin(ctx, st, rs, clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_ADD_VOTER, inst.GetRaftId()); err != nil {
			return fmt.Errorf("replicaset %s: add %s: %w", rs.GetReplicasetId(), inst.GetInstanceId(), err)
		}
		if resp, err = gv.rsAdmin(ctx, st, rs, clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_BARRIER, 0); err != nil {
			return err
		}
	}
	index = resp.GetIndex()
	if lead := st.InstanceByRaftID(resp.GetLeaderRaftId()); lead != nil {
		if err := gv.setReplicasetLeader(ctx, rs, lead.GetInstanceId()); err != nil {
			return err
		}
	}
	// The instance must reach the barrier's index in its replicaset group;
	// until it has, the governor looks again at its next iteration (a new
	// barrier then only moves the goal a little further).
	p, err := gv.progress(ctx, inst)
	if err != nil {
		return err
	}
	if p.GetApplied()[gid] < index {
		return fmt.Errorf("%w: %s has applied %d of %d in replicaset group %d", errWaiting, inst.GetInstanceId(), p.GetApplied()[gid], index, gid)
	}
	return gv.setCurrent(ctx, inst, meta.Replicated)
}

// shardingInit is governor step 5: the first full replicaset gets every
// bucket (once per cluster), the sharding configuration is pushed to every
// instance in service, then ShardingInitialized.
func (gv *governor) shardingInit(ctx context.Context, st *meta.State, inst *metapb.Instance) error {
	if !st.Props.GetBucketsBootstrapped() {
		if rs := st.Replicasets[inst.GetReplicasetId()]; rs != nil && gv.full(st, rs, meta.Replicated, inst) {
			gv.log.Info("bootstrapping buckets", "replicaset", rs.GetReplicasetId(), "buckets", st.Props.GetBucketCount())
			if _, err := gv.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
				Ranges: []*metapb.BucketRange{{First: 1, Last: st.Props.GetBucketCount(), ReplicasetId: rs.GetReplicasetId()}},
			}}}); err != nil {
				return err
			}
			st = gv.n.meta.State()
		}
	}
	if err := gv.pushSharding(ctx, st, inst); err != nil {
		return err
	}
	return gv.setCurrent(ctx, inst, meta.ShardingInitialized)
}

// toOnline is governor step 6: full replicasets without weight get one
// (their share of buckets; the data layer moves them) unless the operator
// set their weight, the configuration is pushed again, then Online.
func (gv *governor) toOnline(ctx context.Context, st *meta.State, inst *metapb.Instance) error {
	for _, rs := range st.SortedReplicasets() {
		// An operator's weight (0 to drain it) is never overridden.
		if rs.GetExpelled() || rs.GetWeight() != 0 || rs.GetWeightByOperator() || !gv.full(st, rs, meta.ShardingInitialized, nil) {
			continue
		}
		gv.log.Info("replicaset is full: raising its weight", "replicaset", rs.GetReplicasetId())
		if _, err := gv.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{
			ReplicasetId: rs.GetReplicasetId(), Weight: new(uint32(1))}}}); err != nil {
			return err
		}
		st = gv.n.meta.State()
	}
	if err := gv.pushSharding(ctx, st, inst); err != nil {
		return err
	}
	return gv.setCurrent(ctx, inst, meta.Online)
}

// full reports whether a replicaset has the replication factor's number of
// members in service, each at least at grade min (the instance being
// advanced counts as there).
func (gv *governor) full(st *meta.State, rs *metapb.Replicaset, min metapb.GradeVariant, advancing *metapb.Instance) bool {
	ready := 0
	for _, m := range st.Members(rs.GetReplicasetId()) {
		if m.GetTargetGrade().GetVariant() != meta.Online {
			continue
		}
		if advancing != nil && m.GetInstanceId() == advancing.GetInstanceId() || gradeAtLeast(m.GetCurrentGrade().GetVariant(), min) {
			ready++
		}
	}
	return uint32(ready) >= st.Props.GetReplicationFactor()
}

var gradeOrder = []metapb.GradeVariant{meta.Offline, meta.RaftSynced, meta.Replicated, meta.ShardingInitialized, meta.Online}

func gradeAtLeast(v, min metapb.GradeVariant) bool {
	return slices.Index(gradeOrder, v) >= slices.Index(gradeOrder, min) && slices.Contains(gradeOrder, v)
}

// pushSharding makes instances apply group 0 up to now, so they use the
// current sharding configuration (K12 step 5). The instance being advanced
// must confirm; the others in service are asked and may lag (an instance
// that cannot answer is the sentinel's business).
func (gv *governor) pushSharding(ctx context.Context, st *meta.State, must *metapb.Instance) error {
	index := gv.n.g0.Load().Applied()
	req := &clusterv1.SyncShardingRequest{CommitIndex: index, ShardingVersion: st.Props.GetShardingVersion()}
	var mustErr error
	for _, inst := range st.SortedInstances() {
		isMust := must != nil && inst.GetInstanceId() == must.GetInstanceId()
		if !isMust && (inst.GetTargetGrade().GetVariant() != meta.Online || !gradeAtLeast(inst.GetCurrentGrade().GetVariant(), meta.Replicated)) {
			continue
		}
		c, err := gv.n.peers.client(inst.GetAddress())
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, gv.n.cfg.Timeouts.Probe)
			_, err = c.SyncSharding(sctx, req)
			cancel()
		}
		if err != nil && isMust {
			mustErr = fmt.Errorf("push sharding configuration %d to %s: %w", req.GetShardingVersion(), inst.GetInstanceId(), err)
		}
	}
	return mustErr
}

func (gv *governor) progress(ctx context.Context, inst *metapb.Instance) (*clusterv1.GetProgressResponse, error) {
	c, err := gv.n.peers.client(inst.GetAddress())
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, gv.n.cfg.Timeouts.Probe)
	defer cancel()
	p, err := c.GetProgress(pctx, &clusterv1.GetProgressRequest{})
	if err != nil {
		return nil, fmt.Errorf("progress of %s: %w", inst.GetInstanceId(), err)
	}
	if p.GetRaftId() != inst.GetRaftId() {
		return nil, fmt.Errorf("%s at %s answers as raft_id %d", inst.GetInstanceId(), inst.GetAddress(), p.GetRaftId())
	}
	return p, nil
}

// rsAdmin runs a GroupAdmin action on the leader of a replicaset's group,
// trying the recorded leader first and then every member.
func (gv *governor) rsAdmin(ctx context.Context, st *meta.State, rs *metapb.Replicaset, action clusterv1.GroupAdminAction, raftID uint64) (*clusterv1.GroupAdminResponse, error) {
	members := firstThe(st.GroupMembers(rs.GetReplicasetId()), func(m *metapb.Instance) bool {
		return m.GetInstanceId() == rs.GetLeaderInstanceId()
	})
	var errs []error
	for _, m := range members {
		c, err := gv.n.peers.client(m.GetAddress())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, gv.n.cfg.Timeouts.PeerCall)
		resp, err := c.GroupAdmin(actx, &clusterv1.GroupAdminRequest{GroupId: rs.GetRaftGroupId(), Action: action, RaftId: raftID})
		cancel()
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", m.GetInstanceId(), err))
	}
	return nil, fmt.Errorf("no leader of replicaset group %d answered: %w", rs.GetRaftGroupId(), errors.Join(errs...))
}

// firstThe orders members with those is holds for first, each group in
// its own order (a stable sort).
func firstThe(members []*metapb.Instance, is func(*metapb.Instance) bool) []*metapb.Instance {
	slices.SortStableFunc(members, func(a, b *metapb.Instance) int {
		switch ia, ib := is(a), is(b); {
		case ia && !ib:
			return -1
		case ib && !ia:
			return 1
		}
		return 0
	})
	return members
}

// replicasetLeader returns the raft id leading a replicaset's group, as
// the first member that answers knows it: first (when not 0) the member
// that reported itself the leader, whose view is the newest (the others
// may not have heard from it yet).
func (gv *governor) replicasetLeader(ctx context.Context, st *meta.State, rs *metapb.Replicaset, first uint64) (uint64, error) {
	members := firstThe(st.GroupMembers(rs.GetReplicasetId()), func(m *metapb.Instance) bool { return m.GetRaftId() == first })
	for _, m := range members {
		if m.GetTargetGrade().GetVariant() != meta.Online && m.GetCurrentGrade().GetVariant() == meta.Offline {
			continue
		}
		p, err := gv.progress(ctx, m)
		if err != nil {
			continue
		}
		if l := p.GetLeaders()[rs.GetRaftGroupId()]; l != 0 {
			return l, nil
		}
	}
	return 0, fmt.Errorf("replicaset %s: no member knows its leader", rs.GetReplicasetId())
}

// takeLeaderReports collects the replicasets whose members reported a new
// leader since the last step.
func (gv *governor) takeLeaderReports() {
	for {
		select {
		case r := <-gv.n.leaderReports:
			gv.leaderReported[r.replicasetID] = r.raftID
		default:
			return
		}
	}
}

// recordReplicasetLeaders keeps each replicaset's recorded leader (its
// read-write instance) true: a replicaset a member reported a new leader
// of is looked up at once, every replicaset every Timeouts.LeaderRecheck
// (the backstop for a report that was lost: a member that won an
// election and died before reporting). The
// leader is what the members' own raft state says (replicasetLeader),
// never the report itself: a report may be stale by the time it arrives.
func (gv *governor) recordReplicasetLeaders(ctx context.Context, st *meta.State) error {
	now := gv.n.clock.Now()
	all := now.Sub(gv.leadersChecked) >= gv.n.cfg.Timeouts.LeaderRecheck
	if !all && len(gv.leaderReported) == 0 {
		return nil
	}
	if all {
		gv.leadersChecked = now
	}
	reported := gv.leaderReported
	gv.leaderReported = map[string]uint64{}
	for _, rs := range st.SortedReplicasets() {
		by, ok := reported[rs.GetReplicasetId()]
		if rs.GetExpelled() || !all && !ok {
			continue
		}
		l, err := gv.replicasetLeader(ctx, st, rs, by)
		if err != nil {
			continue
		}
		if inst := st.InstanceByRaftID(l); inst != nil && inst.GetInstanceId() != rs.GetLeaderInstanceId() {
			gv.log.Info("replicaset leader changed", "replicaset", rs.GetReplicasetId(), "leader", inst.GetInstanceId())
			if err := gv.setReplicasetLeader(ctx, rs, inst.GetInstanceId()); err != nil {
				for id, by := range reported {
					gv.leaderReported[id] = by // looked up again at the retry
				}
				return err
			}
		}
	}
	return nil
}
