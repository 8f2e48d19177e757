package cluster

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	raftv1 "github.com/shardkit/shardkit/api/raft/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset"
)

// Register adds the node's services to a gRPC server: ClusterService and
// the raft transport (which answers Unavailable until raft runs).
func (n *Node) Register(s *grpc.Server) {
	clusterv1.RegisterClusterServiceServer(s, &service{Node: n})
	raftv1.RegisterRaftTransportServiceServer(s, &transportProxy{n: n})
}

// service is the Node as a ClusterServiceServer; the embedded
// Unimplemented server only provides forward compatibility, every method
// of today's service is the Node's.
type service struct {
	unimplemented
	*Node
}

// unimplemented sits one level deeper than *Node, so the Node's methods win.
type unimplemented struct {
	clusterv1.UnimplementedClusterServiceServer
}

const forwardedKey = "x-shardkit-forwarded"

func forwarded(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, forwardedKey, "1")
}

// forward returns a client of the group-0 leader when this node is not
// it (ok), or ok=false when this node leads and should serve the call.
func (n *Node) forward(ctx context.Context) (clusterv1.ClusterServiceClient, bool, error) {
	g0 := n.g0.Load()
	if g0 == nil {
		return nil, false, errNoGroup0
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := g0.WaitFor(wctx, func(g *multiraft.Group) bool { return g.Leader() != 0 }); err != nil {
		return nil, false, status.Error(codes.Unavailable, "group 0 has no leader (no quorum?)")
	}
	lead := g0.Leader()
	if id := n.Identity(); id != nil && uint64(lead) == id.RaftID {
		return nil, false, nil
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return nil, false, status.Errorf(codes.Unavailable, "this instance is not the leader of group 0 (it believes raft_id %d is); retry", lead)
	}
	addr, err := n.res.RaftAddress(lead)
	if err != nil {
		return nil, false, status.Error(codes.Unavailable, err.Error())
	}
	c, err := n.peers.client(addr)
	if err != nil {
		return nil, false, status.Error(codes.Unavailable, err.Error())
	}
	return c, true, nil
}

// Discover implements ClusterService.
func (n *Node) Discover(_ context.Context, req *clusterv1.DiscoverRequest) (*clusterv1.DiscoverResponse, error) {
	if g0 := n.g0.Load(); g0 != nil && g0.Leader() != 0 {
		if addr, err := n.res.RaftAddress(g0.Leader()); err == nil {
			return &clusterv1.DiscoverResponse{Result: &clusterv1.DiscoverResponse_LeaderAddress{LeaderAddress: addr}}, nil
		}
	}
	n.mu.Lock()
	d := n.disc
	n.mu.Unlock()
	if d == nil {
		return nil, status.Error(codes.Unavailable, "this instance is starting; retry")
	}
	return d.handle(req), nil
}

// UpdateInstance implements ClusterService.
func (n *Node) UpdateInstance(ctx context.Context, req *clusterv1.UpdateInstanceRequest) (*clusterv1.UpdateInstanceResponse, error) {
	if c, ok, err := n.forward(ctx); err != nil {
		return nil, err
	} else if ok {
		return c.UpdateInstance(forwarded(ctx), req)
	}
	if err := n.checkClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}
	switch req.GetTargetGrade() {
	case meta.Online, meta.Offline:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "an instance may ask for target Online or Offline, not %s", meta.VariantName(req.GetTargetGrade()))
	}
	res, err := n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{
		InstanceId: req.GetInstanceId(), Variant: req.GetTargetGrade(), Reason: req.GetReason(), Uuid: req.GetUuid(),
	}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.UpdateInstanceResponse{Instance: res.Instance}, nil
}

func (n *Node) checkClusterID(id string) error {
	if id == "" {
		return nil
	}
	if p := n.meta.State().Props; p != nil && p.GetClusterId() != id {
		return status.Errorf(codes.FailedPrecondition, "cluster_id mismatch: instance has %q, cluster has %q", id, p.GetClusterId())
	}
	return nil
}

// GroupAdmin implements ClusterService.
func (n *Node) GroupAdmin(ctx context.Context, req *clusterv1.GroupAdminRequest) (*clusterv1.GroupAdminResponse, error) {
	gid := multiraft.GroupID(req.GetGroupId())
	g := n.group(gid)
	if g == nil {
		return nil, status.Errorf(codes.NotFound, "group %d is not open on this instance", gid)
	}
	st := g.Status()
	if st.Role != "leader" {
		return &clusterv1.GroupAdminResponse{LeaderRaftId: uint64(st.Leader)},
			status.Errorf(codes.FailedPrecondition, "not the leader of group %d (leader: raft_id %d)", gid, st.Leader)
	}
	node := multiraft.NodeID(req.GetRaftId())
	var err error
	resp := &clusterv1.GroupAdminResponse{}
	switch req.GetAction() {
	case clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_ADD_VOTER:
		_, err = g.AddVoter(ctx, node)
	case clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_ADD_LEARNER:
		_, err = g.AddLearner(ctx, node)
	case clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_REMOVE:
		_, err = g.RemoveNode(ctx, node)
	case clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_TRANSFER_LEADERSHIP:
		err = g.TransferLeadership(ctx, node)
	case clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_BARRIER:
		var v any
		v, err = g.Propose(ctx, replicaset.BarrierCommand())
		if r, ok := v.(replicaset.BarrierResult); ok {
			resp.Index = r.Index
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown group admin action %v", req.GetAction())
	}
	if err != nil {
		return nil, statusError(err)
	}
	st = g.Status()
	for _, v := range st.Voters {
		resp.Voters = append(resp.Voters, uint64(v))
	}
	for _, l := range st.Learners {
		resp.Learners = append(resp.Learners, uint64(l))
	}
	resp.LeaderRaftId = uint64(st.Leader)
	return resp, nil
}

// SyncSharding implements ClusterService.
func (n *Node) SyncSharding(ctx context.Context, req *clusterv1.SyncShardingRequest) (*clusterv1.SyncShardingResponse, error) {
	g0 := n.g0.Load()
	if g0 == nil {
		return nil, errNoGroup0
	}
	if err := g0.WaitApplied(ctx, req.GetCommitIndex()); err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "applied index %d has not reached %d: %v", g0.Applied(), req.GetCommitIndex(), err)
	}
	return &clusterv1.SyncShardingResponse{AppliedIndex: g0.Applied()}, nil
}

// GetProgress implements ClusterService.
func (n *Node) GetProgress(context.Context, *clusterv1.GetProgressRequest) (*clusterv1.GetProgressResponse, error) {
	id := n.Identity()
	if id == nil || n.g0.Load() == nil {
		return nil, errNoGroup0
	}
	resp := &clusterv1.GetProgressResponse{RaftId: id.RaftID, Applied: map[uint64]uint64{}, Leaders: map[uint64]uint64{}}
	add := func(gid multiraft.GroupID, g *multiraft.Group) {
		resp.Applied[uint64(gid)] = g.Applied()
		resp.Leaders[uint64(gid)] = uint64(g.Leader())
	}
	add(GroupMeta, n.g0.Load())
	n.mu.Lock()
	for gid, g := range n.rsGroups {
		add(gid, g)
	}
	n.mu.Unlock()
	return resp, nil
}

// transportProxy serves the raft transport once raft runs.
type transportProxy struct {
	raftv1.UnimplementedRaftTransportServiceServer
	n *Node
}

func (p *transportProxy) RaftMessages(s grpc.BidiStreamingServer[raftv1.RaftMessagesRequest, raftv1.RaftMessagesResponse]) error {
	tr := p.n.transport.Load()
	if tr == nil {
		return status.Error(codes.Unavailable, "raft is not running on this instance yet")
	}
	return tr.RaftMessages(s)
}

func (p *transportProxy) RaftSnapshot(s grpc.ClientStreamingServer[raftv1.RaftSnapshotRequest, raftv1.RaftSnapshotResponse]) error {
	tr := p.n.transport.Load()
	if tr == nil {
		return status.Error(codes.Unavailable, "raft is not running on this instance yet")
	}
	return tr.RaftSnapshot(s)
}
