package cluster

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/retry"
)

// A replicaset's leader is recorded in group 0 (Replicaset.leader_instance_id),
// and the routing table that routers and clients read names it. After an
// election, the new leader reports itself to group 0's leader
// (reportLeadership, ReportReplicasetLeader), whose governor checks with
// the members and records it at its next step: the routing table names
// the new leader about one group-0 commit after the election, instead of
// after the governor's periodic recheck (Timeouts.LeaderRecheck), which remains the
// backstop for a report that never came.

// leaderReport is one ReportReplicasetLeader, passed to the governor.
type leaderReport struct {
	replicasetID string
	raftID       uint64
}

// ReportReplicasetLeader implements clusterv1.ClusterServiceServer (on
// group 0's leader, where the governor runs).
func (s *Service) ReportReplicasetLeader(_ context.Context, req *clusterv1.ReportReplicasetLeaderRequest) (*clusterv1.ReportReplicasetLeaderResponse, error) {
	st := s.n.meta.State()
	rs := st.Replicasets[req.GetReplicasetId()]
	if rs == nil {
		return nil, status.Errorf(codes.NotFound, "replicaset_id %q: no such replicaset", req.GetReplicasetId())
	}
	inst := st.InstanceByRaftID(req.GetRaftId())
	if inst == nil || inst.GetReplicasetId() != rs.GetReplicasetId() {
		return nil, status.Errorf(codes.InvalidArgument, "raft_id %d is not a member of replicaset %s", req.GetRaftId(), rs.GetReplicasetId())
	}
	select {
	case s.n.leaderReports <- leaderReport{replicasetID: rs.GetReplicasetId(), raftID: req.GetRaftId()}:
	default:
		// The governor has reports waiting: it looks this replicaset up
		// at its periodic recheck at the latest.
	}
	return &clusterv1.ReportReplicasetLeaderResponse{}, nil
}

// reportLeadership runs on every instance: whenever this instance leads
// its replicaset's group and group 0 records another leader, it reports
// itself to group 0's leader, again every few seconds until the record
// names it or it is no longer the leader.
func (n *Node) reportLeadership(ctx context.Context) {
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 3 * time.Second}
	for ctx.Err() == nil {
		changed := n.meta.Changed()
		g, rsID := n.ownReplicasetGroup()
		self := n.Identity()
		if g == nil || self == nil {
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(time.Second):
			}
			continue
		}
		lead := g.Leader()
		if lead == multiraft.NodeID(self.RaftID) && n.recordedLeader(rsID) != self.InstanceID {
			if err := n.reportLeader(ctx, rsID, self.RaftID); err != nil {
				n.log.Debug("could not report this instance as its replicaset's leader", "replicaset", rsID, "err", err)
			}
			_ = retry.Sleep(ctx, backoff.Next()) // give the report a governor step to be recorded
			continue
		}
		backoff.Reset()
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = g.WaitFor(wctx, func(g *multiraft.Group) bool { return g.Leader() != lead })
		cancel()
	}
}

// ownReplicasetGroup returns this instance's replicaset group and its
// replicaset (nil before it is open).
func (n *Node) ownReplicasetGroup() (*multiraft.Group, string) {
	inst := n.selfInstance()
	if inst == nil {
		return nil, ""
	}
	rs := n.meta.State().Replicasets[inst.GetReplicasetId()]
	if rs == nil {
		return nil, ""
	}
	return n.group(multiraft.GroupID(rs.GetRaftGroupId())), rs.GetReplicasetId()
}

// recordedLeader returns the instance group 0 records as a replicaset's
// leader, as this instance last applied it.
func (n *Node) recordedLeader(rsID string) string {
	if rs := n.meta.State().Replicasets[rsID]; rs != nil {
		return rs.GetLeaderInstanceId()
	}
	return ""
}

func (n *Node) reportLeader(ctx context.Context, rsID string, raftID uint64) error {
	req := &clusterv1.ReportReplicasetLeaderRequest{ReplicasetId: rsID, RaftId: raftID}
	rctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.PeerCall)
	defer cancel()
	_, err := n.fwd.Call(rctx, clusterv1.ClusterService_ReportReplicasetLeader_FullMethodName, req, func(ctx context.Context) (any, error) {
		return n.svc.ReportReplicasetLeader(ctx, req)
	})
	if err != nil {
		return fmt.Errorf("report to group 0's leader: %w", err)
	}
	return nil
}
