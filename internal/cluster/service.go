package cluster

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	raftv1 "github.com/shardkit/shardkit/api/raft/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/auth"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// Service is a node's RPC surface: ClusterService, whose methods are in
// the files of their concern (join.go, expel.go, leases.go, users.go,
// status.go, and here), each a thin edge that checks and converts the
// request and asks the Node. The Node is the instance itself: its
// lifecycle, group 0 and its governor. The embedded Unimplemented server
// only provides forward compatibility; every method of today's service is
// Service's own.
type Service struct {
	clusterv1.UnimplementedClusterServiceServer
	n *Node
}

// Service returns the node's RPC surface.
func (n *Node) Service() *Service { return n.svc }

// Register adds the node's services to a gRPC server: ClusterService and
// the raft transport (which answers Unavailable until raft runs).
func (s *Service) Register(srv *grpc.Server) {
	clusterv1.RegisterClusterServiceServer(srv, s)
	raftv1.RegisterRaftTransportServiceServer(srv, &transportProxy{n: s.n})
}

// Forwarder routes the calls only the group-0 leader serves to it; the
// server installs its Interceptor, and the node calls its own handlers
// through its Call.
func (n *Node) Forwarder() *forward.Forwarder { return n.fwd }

// Route is the instance's forward.Route: the methods that only group 0's
// leader serves (auth.LeaderOnly, the one method table: the cluster's
// membership, leases and users, the data layer's DDL, the sharding
// changes) go to the leader, waiting up to LeaderWait for one to be
// known, and every answer names the leader's address in
// client.LeaderHeader; every other call is served here.
func (n *Node) Route(ctx context.Context, method string, _ any) (forward.Decision, error) {
	if !auth.LeaderOnly(method) {
		return forward.Decision{}, nil
	}
	return n.leaderDecision(ctx)
}

// leaderDecision routes a call to the group-0 leader (this instance when
// it leads).
func (n *Node) leaderDecision(ctx context.Context) (forward.Decision, error) {
	g0 := n.g0.Load()
	if g0 == nil {
		return forward.Decision{}, n.errNotRunning()
	}
	wctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.LeaderWait)
	defer cancel()
	if err := g0.WaitFor(wctx, func(g *multiraft.Group) bool { return g.Leader() != 0 }); err != nil {
		return forward.Decision{}, status.Errorf(codes.Unavailable, "group 0 has no leader after %v (no quorum?)", n.cfg.Timeouts.LeaderWait)
	}
	lead := g0.Leader()
	addr, err := n.res.RaftAddress(lead)
	if err != nil {
		return forward.Decision{}, status.Error(codes.Unavailable, err.Error())
	}
	d := forward.Decision{Hint: addr, HintKey: client.LeaderHeader, Why: fmt.Sprintf("the leader of group 0 (it believes raft_id %d is)", lead)}
	if id := n.Identity(); id == nil || uint64(lead) != id.RaftID {
		d.Addr = addr
	}
	return d, nil
}

// DialPeer returns the node's connection to another instance (the
// forward.Dial of its peer connections).
func (n *Node) DialPeer(addr string) (grpc.ClientConnInterface, error) { return n.peers.conn(addr) }

// Discover implements clusterv1.ClusterServiceServer.
func (s *Service) Discover(_ context.Context, req *clusterv1.DiscoverRequest) (*clusterv1.DiscoverResponse, error) {
	n := s.n
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

// UpdateInstance implements clusterv1.ClusterServiceServer.
func (s *Service) UpdateInstance(ctx context.Context, req *clusterv1.UpdateInstanceRequest) (*clusterv1.UpdateInstanceResponse, error) {
	if err := s.n.checkClusterID(req.GetClusterId()); err != nil {
		return nil, err
	}
	target := metaVariant(req.GetTargetGrade())
	switch target {
	case meta.Online, meta.Offline:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "an instance may ask for target Online or Offline, not %s", meta.VariantName(target))
	}
	if err := s.n.updateAddress(ctx, req); err != nil {
		return nil, err
	}
	res, err := s.n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{
		InstanceId: req.GetInstanceId(), Variant: target, Reason: req.GetReason(), Uuid: req.GetUuid(),
	}}})
	if err != nil {
		return nil, err
	}
	return &clusterv1.UpdateInstanceResponse{Instance: apiInstance(res.Instance)}, nil
}

// updateAddress records the addresses an instance sends with its request
// for Online when group 0 has others for it: it was restarted with another
// --advertise or --http-listen, and its peers reach it there from now on.
// A record of another uuid (the id reused by a new instance) is left
// alone; the grade's own uuid check refuses the request.
func (n *Node) updateAddress(ctx context.Context, req *clusterv1.UpdateInstanceRequest) error {
	if req.GetAddress() == "" {
		return nil
	}
	inst := n.meta.State().Instance(req.GetInstanceId())
	if inst == nil || req.GetUuid() != "" && inst.GetUuid() != req.GetUuid() ||
		inst.GetAddress() == req.GetAddress() && inst.GetHttpAddress() == req.GetHttpAddress() {
		return nil
	}
	if _, err := n.metaCall(ctx, &metapb.Command{Op: &metapb.Command_SetAddress{SetAddress: &metapb.SetAddress{
		InstanceId: req.GetInstanceId(), Address: req.GetAddress(), HttpAddress: req.GetHttpAddress(),
	}}}); err != nil {
		return err
	}
	n.log.Info("instance addresses changed", "instance", req.GetInstanceId(), "from", inst.GetAddress(), "to", req.GetAddress(),
		"http_from", inst.GetHttpAddress(), "http_to", req.GetHttpAddress())
	return nil
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

// GroupAdmin implements clusterv1.ClusterServiceServer.
func (s *Service) GroupAdmin(ctx context.Context, req *clusterv1.GroupAdminRequest) (*clusterv1.GroupAdminResponse, error) {
	gid := multiraft.GroupID(req.GetGroupId())
	g := s.n.group(gid)
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
		// A read index: once it returns, this leader has applied every
		// entry committed before the call, so its applied index is one
		// that peers must reach to have them all.
		if err = g.ReadIndex(ctx); err == nil {
			resp.Index = g.Applied()
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown group admin action %v", req.GetAction())
	}
	if err != nil {
		return nil, StatusError(err)
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

// SyncSharding implements clusterv1.ClusterServiceServer.
func (s *Service) SyncSharding(ctx context.Context, req *clusterv1.SyncShardingRequest) (*clusterv1.SyncShardingResponse, error) {
	g0 := s.n.g0.Load()
	if g0 == nil {
		return nil, errNoGroup0
	}
	if err := g0.WaitApplied(ctx, req.GetCommitIndex()); err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "applied index %d has not reached %d: %v", g0.Applied(), req.GetCommitIndex(), err)
	}
	return &clusterv1.SyncShardingResponse{AppliedIndex: g0.Applied()}, nil
}

// GetProgress implements clusterv1.ClusterServiceServer.
func (s *Service) GetProgress(context.Context, *clusterv1.GetProgressRequest) (*clusterv1.GetProgressResponse, error) {
	n := s.n
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
