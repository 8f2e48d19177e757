package cluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/retry"
)

// join asks the cluster (through any instance) to add this one (K7) and
// keeps what the answer says (K8). Network trouble is retried with backoff;
// a refusal ends the process.
func (n *Node) join(ctx context.Context, addr string) (*Identity, error) {
	uuid := newUUID()
	req := n.joinRequest(uuid)
	backoff := retry.Backoff{Initial: 200 * time.Millisecond, Max: 3 * time.Second}
	for {
		c, err := n.peers.client(addr)
		if err != nil {
			return nil, &RefusedError{Err: fmt.Errorf("cannot join through %s: %w", addr, err)}
		}
		rctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.Join)
		resp, err := c.RaftJoin(rctx, req)
		cancel()
		if err == nil {
			return n.joined(resp)
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists, codes.NotFound, codes.PermissionDenied:
			return nil, &RefusedError{Err: fmt.Errorf("join refused: %s", status.Convert(err).Message())}
		}
		n.log.Info("join: retrying", "through", addr, "err", err)
		if err := retry.Sleep(ctx, backoff.Next()); err != nil {
			return nil, err
		}
	}
}

func (n *Node) joined(resp *clusterv1.RaftJoinResponse) (*Identity, error) {
	inst := resp.GetInstance()
	ident := &Identity{
		ClusterID:        n.cfg.ClusterID,
		ClusterUUID:      resp.GetClusterUuid(),
		InstanceID:       inst.GetInstanceId(),
		RaftID:           inst.GetRaftId(),
		UUID:             inst.GetUuid(),
		ReplicasetID:     inst.GetReplicasetId(),
		FailureDomain:    inst.GetFailureDomain(),
		Peers:            map[uint64]string{},
		PeersCommitIndex: resp.GetCommitIndex(),
	}
	for _, p := range resp.GetRaftGroup() {
		ident.Peers[p.GetRaftId()] = p.GetAddress()
	}
	if err := saveIdentity(n.db, ident); err != nil {
		return nil, err
	}
	n.log.Info("joined the cluster", "instance_id", ident.InstanceID, "raft_id", ident.RaftID, "replicaset_id", ident.ReplicasetID)
	return ident, nil
}

// RaftJoin implements clusterv1.ClusterServiceServer (on the leader; others forward).
func (s *Service) RaftJoin(ctx context.Context, req *clusterv1.RaftJoinRequest) (*clusterv1.RaftJoinResponse, error) {
	n := s.n
	if err := quickJoinCheck(n.meta.State(), req); err != nil {
		return nil, StatusError(err)
	}
	res, err := n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_Join{Join: &metapb.Join{Request: metaJoinRequest(req)}}})
	if err != nil {
		return nil, err
	}
	inst := res.Instance
	// The joiner follows group 0 from now on, as a learner; the governor
	// makes it a voter once it is Online.
	g0 := n.g0.Load()
	st := g0.Status()
	id := multiraft.NodeID(inst.GetRaftId())
	if !slices.Contains(st.Voters, id) && !slices.Contains(st.Learners, id) {
		if _, err := g0.AddLearner(ctx, id); err != nil {
			return nil, StatusError(fmt.Errorf("add %s as a learner of group 0: %w", inst.GetInstanceId(), err))
		}
		st = g0.Status()
	}
	ms := n.meta.State()
	resp := &clusterv1.RaftJoinResponse{Instance: apiInstance(inst), ClusterUuid: ms.Props.GetClusterUuid(), CommitIndex: inst.GetCommitIndex()}
	for _, m := range append(st.Voters, st.Learners...) {
		if p := ms.InstanceByRaftID(uint64(m)); p != nil {
			resp.RaftGroup = append(resp.RaftGroup, apiInstance(p))
		}
	}
	return resp, nil
}

// quickJoinCheck refuses, before proposing, a new instance whose advertise
// address belongs to a live one. Apply checks it again (with the rest), in
// the same order: a duplicate instance_id is reported first.
func quickJoinCheck(st *meta.State, req *clusterv1.RaftJoinRequest) error {
	if !st.Booted() || st.InstanceByUUID(req.GetUuid()) != nil {
		return nil
	}
	if old := st.Instance(req.GetInstanceId()); old != nil && !meta.IsExpelled(old) {
		return nil
	}
	if err := st.CheckAddressFree(req.GetAdvertiseAddress(), req.GetUuid()); err != nil {
		return err
	}
	return nil
}
