package auth

import (
	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	raftv1 "github.com/shardkit/shardkit/api/raft/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// Role is what a caller may do; each includes the ones before it.
type Role int

// Roles. Numbers match clusterv1.Role and metapb.UserRole for the users'.
const (
	None   Role = 0
	Reader Role = 1
	Writer Role = 2
	Admin  Role = 3
	// Node is an instance (a node certificate): every method. No user has it.
	Node Role = 4
)

func (r Role) String() string {
	switch r {
	case Reader:
		return "reader"
	case Writer:
		return "writer"
	case Admin:
		return "admin"
	case Node:
		return "node (instances only)"
	}
	return "none"
}

// ByProcedure marks Call and MapCall: the role depends on the procedure's
// declared mode (ro: reader, rw: writer).
const ByProcedure Role = -1

// ByItems marks Multi and Stream: the call as a whole needs a reader (the
// least any item needs); each item is then checked as its own unary call
// would be (Authorizer.AuthorizeItem, called by the router: a write item
// needs a writer, a get a reader), and an item the caller may not do is
// refused alone, with the PermissionDenied its unary call would get; the
// others are served.
const ByItems Role = -2

// rules is the role each gRPC method needs: the one table. TestRulesCover
// fails when a method the server registers has no entry here.
var rules = map[string]Role{
	// Cluster: membership is for instances; status, reads of leases and
	// discovery for any user; leases for writers; expel and users for admins.
	clusterv1.ClusterService_Discover_FullMethodName:       Reader,
	clusterv1.ClusterService_RaftJoin_FullMethodName:       Node,
	clusterv1.ClusterService_UpdateInstance_FullMethodName: Node,
	clusterv1.ClusterService_Expel_FullMethodName:          Admin,
	clusterv1.ClusterService_GetStatus_FullMethodName:      Reader,
	clusterv1.ClusterService_AcquireLease_FullMethodName:   Writer,
	clusterv1.ClusterService_RenewLease_FullMethodName:     Writer,
	clusterv1.ClusterService_ReleaseLease_FullMethodName:   Writer,
	clusterv1.ClusterService_GetLease_FullMethodName:       Reader,
	clusterv1.ClusterService_GroupAdmin_FullMethodName:     Node,
	clusterv1.ClusterService_SyncSharding_FullMethodName:   Node,
	clusterv1.ClusterService_GetProgress_FullMethodName:    Reader,
	clusterv1.ClusterService_CreateUser_FullMethodName:     Admin,
	clusterv1.ClusterService_DropUser_FullMethodName:       Admin,
	clusterv1.ClusterService_SetUserRole_FullMethodName:    Admin,
	clusterv1.ClusterService_ListUsers_FullMethodName:      Admin,

	// Data.
	datav1.DataService_Write_FullMethodName:       Writer,
	datav1.DataService_Get_FullMethodName:         Reader,
	datav1.DataService_Range_FullMethodName:       Reader,
	datav1.DataService_Call_FullMethodName:        ByProcedure,
	datav1.DataService_MapCall_FullMethodName:     ByProcedure,
	datav1.DataService_GetRouting_FullMethodName:  Reader,
	datav1.DataService_CreateSpace_FullMethodName: Admin,
	datav1.DataService_DropSpace_FullMethodName:   Admin,
	datav1.DataService_ListSpaces_FullMethodName:  Reader,
	datav1.DataService_Multi_FullMethodName:       ByItems,
	datav1.DataService_Stream_FullMethodName:      ByItems,

	// Sharding: looking is reading; changing is an admin's.
	datav1.ShardingService_RebalanceStatus_FullMethodName: Reader,
	datav1.ShardingService_SetWeight_FullMethodName:       Admin,
	datav1.ShardingService_SetLocked_FullMethodName:       Admin,
	datav1.ShardingService_MoveBucket_FullMethodName:      Admin,
	datav1.ShardingService_PinBucket_FullMethodName:       Admin,
	datav1.ShardingService_SetRebalancer_FullMethodName:   Admin,
	datav1.ShardingService_Reshard_FullMethodName:         Admin,

	// Between instances only.
	raftv1.RaftTransportService_RaftMessages_FullMethodName: Node,
	raftv1.RaftTransportService_RaftSnapshot_FullMethodName: Node,
	rspb.BucketService_SetBuckets_FullMethodName:            Node,
	rspb.BucketService_ReceiveBuckets_FullMethodName:        Node,
	rspb.BucketService_SendBuckets_FullMethodName:           Node,
	rspb.BucketService_Lookup_FullMethodName:                Node,
	rspb.BucketService_LookupRange_FullMethodName:           Node,
	rspb.BucketService_Buckets_FullMethodName:               Node,
}

// Rule returns the role a method needs; false when the table has none
// (users are refused such a method).
func Rule(method string) (Role, bool) {
	r, ok := rules[method]
	return r, ok
}
