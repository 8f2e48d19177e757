package cli

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// fakeCluster is a test double of ClusterService: GetStatus answers a
// fixed response (expelled instances included whatever the request says,
// so that the client's own filter is tested), Expel runs a test hook.
type fakeCluster struct {
	clusterv1.UnimplementedClusterServiceServer

	status *clusterv1.GetStatusResponse
	expel  func(context.Context, *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error)

	mu         sync.Mutex
	statusReqs []*clusterv1.GetStatusRequest
	expelReqs  []*clusterv1.ExpelRequest
}

func (f *fakeCluster) GetStatus(_ context.Context, r *clusterv1.GetStatusRequest) (*clusterv1.GetStatusResponse, error) {
	f.mu.Lock()
	f.statusReqs = append(f.statusReqs, proto.Clone(r).(*clusterv1.GetStatusRequest))
	f.mu.Unlock()
	return f.status, nil
}

func (f *fakeCluster) Expel(ctx context.Context, r *clusterv1.ExpelRequest) (*clusterv1.ExpelResponse, error) {
	f.mu.Lock()
	f.expelReqs = append(f.expelReqs, proto.Clone(r).(*clusterv1.ExpelRequest))
	f.mu.Unlock()
	return f.expel(ctx, r)
}

func (f *fakeCluster) lastStatusReq() *clusterv1.GetStatusRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.statusReqs) == 0 {
		return nil
	}
	return f.statusReqs[len(f.statusReqs)-1]
}

func (f *fakeCluster) lastExpelReq() *clusterv1.ExpelRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.expelReqs) == 0 {
		return nil
	}
	return f.expelReqs[len(f.expelReqs)-1]
}

// serve starts f on a loopback port and returns its address.
func (f *fakeCluster) serve(t *testing.T) string {
	t.Helper()
	return serveGRPC(t, func(s *grpc.Server) { clusterv1.RegisterClusterServiceServer(s, f) })
}

// serveGRPC starts a gRPC server with what register puts on it, on a
// loopback port, stopped when the test ends; it returns the address.
func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String()
}

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func grade(v clusterv1.GradeVariant, inc uint64) *clusterv1.Grade {
	return &clusterv1.Grade{Variant: v, Incarnation: inc}
}

// sampleStatus: a 4-instance cluster, deliberately out of order; i4 is
// expelled, r3 its expelled replicaset; i3's role is left for the client
// to derive from the learner list.
func sampleStatus() *clusterv1.GetStatusResponse {
	const (
		online   = clusterv1.GradeVariant_GRADE_VARIANT_ONLINE
		offline  = clusterv1.GradeVariant_GRADE_VARIANT_OFFLINE
		expelled = clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED
		synced   = clusterv1.GradeVariant_GRADE_VARIANT_RAFT_SYNCED
	)
	return &clusterv1.GetStatusResponse{
		ClusterId: "demo", ClusterUuid: "c0ffee00-0000-4000-8000-000000000001",
		LeaderRaftId: 1, Term: 3, CommitIndex: 42,
		Voters: []uint64{2, 1}, Learners: []uint64{3},
		Properties: &clusterv1.ClusterProperties{ReplicationFactor: 2, BucketCount: 3000, ShardingVersion: 5},
		Instances: []*clusterv1.InstanceStatus{
			{RaftRole: "none", Instance: &clusterv1.Instance{
				InstanceId: "i4", RaftId: 4, Uuid: "u4", ReplicasetId: "r3", Address: "127.0.0.1:3304",
				CurrentGrade: grade(expelled, 2), TargetGrade: grade(expelled, 2), TargetReason: "expel",
			}},
			{RaftRole: "voter", Instance: &clusterv1.Instance{
				InstanceId: "i2", RaftId: 2, Uuid: "u2", ReplicasetId: "r1", ReplicasetUuid: "ru1", Address: "127.0.0.1:3302",
				FailureDomain: map[string]string{"dc": "spb", "rack": "2"},
				CurrentGrade:  grade(online, 1), TargetGrade: grade(online, 1), TargetReason: "online",
				TargetChangedUnixMs: 1767225600123, CommitIndex: 30,
			}},
			{Instance: &clusterv1.Instance{
				InstanceId: "i3", RaftId: 3, Uuid: "u3", ReplicasetId: "r2", ReplicasetUuid: "ru2", Address: "127.0.0.1:3303",
				CurrentGrade: grade(offline, 1), TargetGrade: grade(synced, 2), TargetReason: "auto-online",
			}},
			{RaftRole: "voter", Instance: &clusterv1.Instance{
				InstanceId: "i1", RaftId: 1, Uuid: "u1", ReplicasetId: "r1", ReplicasetUuid: "ru1", Address: "127.0.0.1:3301",
				FailureDomain: map[string]string{"dc": "msk"}, HttpAddress: "127.0.0.1:8001",
				CurrentGrade: grade(online, 3), TargetGrade: grade(online, 3), TargetReason: "online",
			}},
		},
		Replicasets: []*clusterv1.ReplicasetStatus{
			{Replicaset: &clusterv1.Replicaset{ReplicasetId: "r3", Uuid: "ru3", Expelled: true, RaftGroupId: 3}, Instances: []string{"i4"}},
			{Replicaset: &clusterv1.Replicaset{ReplicasetId: "r2", Uuid: "ru2", LeaderInstanceId: "i3", RaftGroupId: 2},
				Instances: []string{"i3"}, TargetBucketCount: 0},
			{Replicaset: &clusterv1.Replicaset{ReplicasetId: "r1", Uuid: "ru1", LeaderInstanceId: "i1", Weight: 1, RaftGroupId: 1},
				Instances: []string{"i2", "i1"}, BucketCount: 3000, TargetBucketCount: 3000},
		},
	}
}

// serveWithout starts a server whose ClusterService implements nothing.
func (f *fakeCluster) serveWithout(t *testing.T) string {
	t.Helper()
	return serveGRPC(t, func(s *grpc.Server) {
		clusterv1.RegisterClusterServiceServer(s, &clusterv1.UnimplementedClusterServiceServer{})
	})
}

// hangingAddr is a loopback address that accepts connections and never
// answers on them, as a stopped (SIGSTOP) process's listener does.
func hangingAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return lis.Addr().String()
}
