package cluster

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// Expel implements clusterv1.ClusterServiceServer (K14): target Expelled, then wait until
// the governor has made the current grade Expelled. Idempotent.
func (s *Service) Expel(ctx context.Context, req *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
	n := s.n
	if err := n.checkClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}
	timeout := time.Duration(req.GetTimeoutMs()) * time.Millisecond
	if timeout <= 0 {
		timeout = n.cfg.Timeouts.ExpelWait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := n.g0.Load().ReadIndex(ctx); err != nil {
		return nil, StatusError(err)
	}
	st := n.meta.State()
	inst := st.Instance(req.GetInstanceId())
	if inst == nil {
		return nil, status.Errorf(codes.NotFound, "no instance %q in the cluster", req.GetInstanceId())
	}
	if inst.GetCurrentGrade().GetVariant() != meta.Expelled {
		if inst.GetTargetGrade().GetVariant() != meta.Expelled {
			if st.CountNotExpelled() <= 1 { // the state machine checks it again
				return nil, status.Errorf(codes.FailedPrecondition, "cannot expel %q: it is the last instance of the cluster", inst.GetInstanceId())
			}
			cur, tgt := inst.GetCurrentGrade().GetVariant(), inst.GetTargetGrade().GetVariant()
			if !req.GetForce() && (cur != meta.Offline || tgt != meta.Offline) {
				return nil, status.Errorf(codes.FailedPrecondition,
					"attempt to expel instance %q which is not Offline but %s (target %s); stop it first, or rerun with --force",
					inst.GetInstanceId(), meta.VariantName(cur), meta.VariantName(tgt))
			}
			if !req.GetLoseBuckets() { // the state machine checks it again
				if err := st.CheckExpelKeepsBuckets(inst); err != nil {
					return nil, StatusError(err)
				}
			}
		}
		if _, err := n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{
			InstanceId: inst.GetInstanceId(), Variant: meta.Expelled, Reason: "expel", LoseBuckets: req.GetLoseBuckets()}}}); err != nil {
			return nil, err
		}
	}
	// What the expel gives up: the buckets of a replicaset it was the last
	// instance of (they stay assigned to that replicaset, now expelled).
	var lost uint32
	var lostRS string
	if req.GetLoseBuckets() {
		if rs := n.meta.State().Replicasets[inst.GetReplicasetId()]; rs != nil {
			if others := n.meta.State().Members(rs.GetReplicasetId()); len(others) == 0 {
				lost, lostRS = uint32(n.meta.State().BucketCounts()[rs.GetReplicasetId()]), rs.GetReplicasetId()
			}
		}
	}
	for {
		ch := n.meta.Changed()
		cur := n.meta.State().Instance(req.GetInstanceId())
		if cur.GetCurrentGrade().GetVariant() == meta.Expelled {
			resp := &clusterv1.ExpelResponse{Instance: apiInstance(cur)}
			if lost > 0 {
				resp.LostBuckets, resp.LostReplicasetId = lost, lostRS
			}
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, status.Errorf(codes.DeadlineExceeded, "expel of %q not confirmed within %v: its current grade is still %s",
				req.GetInstanceId(), timeout, meta.FormatGrade(cur.GetCurrentGrade()))
		case <-ch:
		}
	}
}
