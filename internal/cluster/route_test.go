package cluster

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// Route sends to group 0's leader exactly the methods the method table
// marks leader-only, the cluster's and the data layer's alike: on a node
// that runs no group 0 those fail Unavailable (there is no leader to go
// to), and every other method is served where it arrives.
func TestRouteSendsLeaderOnlyMethodsToTheLeader(t *testing.T) {
	n := NewNode(Config{NewReplicasetSM: func(multiraft.GroupID) (multiraft.StateMachine, error) { return nil, nil }}, nil, nil)
	for _, tc := range []struct {
		method string
		leader bool
	}{
		{clusterv1.ClusterService_RaftJoin_FullMethodName, true},
		{clusterv1.ClusterService_AcquireLease_FullMethodName, true},
		{clusterv1.ClusterService_CreateUser_FullMethodName, true},
		{datav1.DataService_CreateSpace_FullMethodName, true},
		{datav1.ShardingService_Reshard_FullMethodName, true},
		{clusterv1.ClusterService_GetStatus_FullMethodName, false},
		{clusterv1.ClusterService_Discover_FullMethodName, false},
		{datav1.DataService_Write_FullMethodName, false},
		{datav1.DataService_ListSpaces_FullMethodName, false},
		{datav1.ShardingService_RebalanceStatus_FullMethodName, false},
		{"/no.such.Service/Method", false},
	} {
		d, err := n.Route(context.Background(), tc.method, nil)
		switch {
		case tc.leader && status.Code(err) != codes.Unavailable:
			t.Errorf("%s: %+v, %v; want Unavailable (it goes to group 0's leader, and there is none)", tc.method, d, err)
		case !tc.leader && (err != nil || d.Addr != "" || d.Hint != ""):
			t.Errorf("%s: %+v, %v; want it served here", tc.method, d, err)
		}
	}
}
