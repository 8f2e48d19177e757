package cluster

import (
	"context"
	"fmt"
	"slices"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// downgrade is governor step 2 for an instance whose target is Offline or
// Expelled: make sure the cluster can go on without it, then set its
// current grade to the target.
func (gv *governor) downgrade(ctx context.Context, st *meta.State, gs multiraft.Status, inst *metapb.Instance) error {
	n := gv.n
	tgt := inst.GetTargetGrade().GetVariant()
	// The leader itself is leaving: hand leadership over; the next leader
	// goes on from here.
	if inst.GetRaftId() == uint64(gs.Node) {
		to := bestSuccessor(st, gs)
		if to != 0 {
			gv.log.Info("this leader is leaving; transferring leadership", "to", uint64(to))
			tctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.PeerCall)
			defer cancel()
			return n.g0.Load().TransferLeadership(tctx, to)
		}
		if tgt == meta.Expelled {
			// An expelled leader cannot lead on; wait for a successor (the
			// conf change step promotes one).
			return fmt.Errorf("%w: the leader is expelled but no voter can take over yet", errWaiting)
		}
	}
	rs := st.Replicasets[inst.GetReplicasetId()]
	if rs != nil {
		if err := gv.leaveReplicaset(ctx, st, rs, inst); err != nil {
			return err
		}
	}
	if err := gv.setCurrent(ctx, inst, tgt); err != nil {
		return err
	}
	// Best effort: the others learn the new weights; one that cannot answer
	// is not waited for (pushSharding only fails for a required instance).
	return gv.pushSharding(ctx, n.meta.State(), nil)
}

// bestSuccessor is the active voter staying Online with the most log,
// other than the leader.
func bestSuccessor(st *meta.State, gs multiraft.Status) multiraft.NodeID {
	var best multiraft.NodeID
	var match uint64
	for _, p := range gs.Peers {
		if p.Node == gs.Node || p.Learner || !p.Active || !slices.Contains(gs.Voters, p.Node) {
			continue
		}
		if inst := st.InstanceByRaftID(uint64(p.Node)); inst == nil || inst.GetTargetGrade().GetVariant() != meta.Online {
			continue
		}
		if best == 0 || p.Match > match {
			best, match = p.Node, p.Match
		}
	}
	return best
}

// leaveReplicaset prepares a replicaset for one of its members leaving: a
// new replicaset leader, removal from the group when expelled, and weight
// 0 (and the replicaset expelled) when it was the last one in service.
func (gv *governor) leaveReplicaset(ctx context.Context, st *meta.State, rs *metapb.Replicaset, inst *metapb.Instance) error {
	var others []*metapb.Instance
	for _, m := range st.Members(rs.GetReplicasetId()) {
		if m.GetInstanceId() != inst.GetInstanceId() && m.GetTargetGrade().GetVariant() == meta.Online &&
			m.GetCurrentGrade().GetVariant() != meta.Offline {
			others = append(others, m)
		}
	}
	gid := rs.GetRaftGroupId()
	expel := inst.GetTargetGrade().GetVariant() == meta.Expelled
	if len(others) > 0 {
		lead, err := gv.replicasetLeader(ctx, st, rs, 0)
		if err == nil && lead == inst.GetRaftId() {
			to := others[0].GetRaftId()
			gv.log.Info("replicaset leader is leaving; transferring", "replicaset", rs.GetReplicasetId(), "to", others[0].GetInstanceId())
			if _, err := gv.rsAdmin(ctx, st, rs, clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_TRANSFER_LEADERSHIP, to); err != nil {
				return fmt.Errorf("replicaset %s: transfer leadership to %s: %w", rs.GetReplicasetId(), others[0].GetInstanceId(), err)
			}
			if err := gv.setReplicasetLeader(ctx, rs, others[0].GetInstanceId()); err != nil {
				return err
			}
		}
		if expel {
			if _, err := gv.rsAdmin(ctx, st, rs, clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_REMOVE, inst.GetRaftId()); err != nil {
				return fmt.Errorf("replicaset %s: remove %s from group %d: %w", rs.GetReplicasetId(), inst.GetInstanceId(), gid, err)
			}
		}
		return nil
	}
	// The last member in service: its replicaset takes no buckets now.
	// (An operator's weight stays, unless the replicaset goes: the mover
	// leaves a replicaset without a leader alone anyway.)
	if (rs.GetWeight() != 0 && !rs.GetWeightByOperator()) || (expel && !rs.GetExpelled()) {
		set := &metapb.SetReplicaset{ReplicasetId: rs.GetReplicasetId(), Weight: new(uint32(0))}
		if expel && len(st.Members(rs.GetReplicasetId())) <= 1 {
			set.Expelled = new(true)
		}
		gv.log.Info("last member of the replicaset is leaving: weight 0", "replicaset", rs.GetReplicasetId())
		if _, err := gv.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: set}}); err != nil {
			return err
		}
	}
	return nil
}

func (gv *governor) setReplicasetLeader(ctx context.Context, rs *metapb.Replicaset, instanceID string) error {
	if rs.GetLeaderInstanceId() == instanceID {
		return nil
	}
	_, err := gv.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{
		ReplicasetId: rs.GetReplicasetId(), LeaderInstanceId: new(instanceID)}}})
	return err
}
