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

// Method is what the one method table says of a gRPC method.
type Method struct {
	// Role is what a caller needs (or ByProcedure, ByItems).
	Role Role
	// Leader: only group 0's leader serves the method (it changes or reads
	// group 0 through its leader). Any other instance forwards the call
	// there, one hop (internal/forward, with the route internal/cluster
	// keeps); every other call is served where it arrives (the data calls
	// then route themselves to their bucket, in the router).
	Leader bool
}

// methods is the one table of every gRPC method an instance serves: the
// role it needs (this package checks it) and whether only group 0's
// leader serves it (the cluster's route reads that). TestRulesCover fails
// when a method the server registers has no entry here.
var methods = map[string]Method{
	// Cluster: membership is for instances; status, reads of leases and
	// discovery for any user; leases for writers; expel and users for admins.
	clusterv1.ClusterService_Discover_FullMethodName:               {Role: Reader},
	clusterv1.ClusterService_RaftJoin_FullMethodName:               {Role: Node, Leader: true},
	clusterv1.ClusterService_UpdateInstance_FullMethodName:         {Role: Node, Leader: true},
	clusterv1.ClusterService_Expel_FullMethodName:                  {Role: Admin, Leader: true},
	clusterv1.ClusterService_GetStatus_FullMethodName:              {Role: Reader},
	clusterv1.ClusterService_AcquireLease_FullMethodName:           {Role: Writer, Leader: true},
	clusterv1.ClusterService_RenewLease_FullMethodName:             {Role: Writer, Leader: true},
	clusterv1.ClusterService_ReleaseLease_FullMethodName:           {Role: Writer, Leader: true},
	clusterv1.ClusterService_GetLease_FullMethodName:               {Role: Reader, Leader: true},
	clusterv1.ClusterService_GroupAdmin_FullMethodName:             {Role: Node},
	clusterv1.ClusterService_SyncSharding_FullMethodName:           {Role: Node},
	clusterv1.ClusterService_GetProgress_FullMethodName:            {Role: Reader},
	clusterv1.ClusterService_ReportReplicasetLeader_FullMethodName: {Role: Node, Leader: true},
	clusterv1.ClusterService_CreateUser_FullMethodName:             {Role: Admin, Leader: true},
	clusterv1.ClusterService_DropUser_FullMethodName:               {Role: Admin, Leader: true},
	clusterv1.ClusterService_SetUserRole_FullMethodName:            {Role: Admin, Leader: true},
	clusterv1.ClusterService_ListUsers_FullMethodName:              {Role: Admin, Leader: true},
	clusterv1.ClusterService_SetUserPassword_FullMethodName:        {Role: Admin, Leader: true},

	// Data.
	datav1.DataService_Write_FullMethodName:       {Role: Writer},
	datav1.DataService_Get_FullMethodName:         {Role: Reader},
	datav1.DataService_Range_FullMethodName:       {Role: Reader},
	datav1.DataService_Call_FullMethodName:        {Role: ByProcedure},
	datav1.DataService_MapCall_FullMethodName:     {Role: ByProcedure},
	datav1.DataService_GetRouting_FullMethodName:  {Role: Reader},
	datav1.DataService_CreateSpace_FullMethodName: {Role: Admin, Leader: true},
	datav1.DataService_DropSpace_FullMethodName:   {Role: Admin, Leader: true},
	datav1.DataService_ListSpaces_FullMethodName:  {Role: Reader},
	datav1.DataService_Multi_FullMethodName:       {Role: ByItems},
	datav1.DataService_Stream_FullMethodName:      {Role: ByItems},
	datav1.DataService_Watch_FullMethodName:       {Role: Reader},

	// Sharding: looking is reading; changing is an admin's.
	datav1.ShardingService_RebalanceStatus_FullMethodName: {Role: Reader},
	datav1.ShardingService_SetWeight_FullMethodName:       {Role: Admin, Leader: true},
	datav1.ShardingService_SetLocked_FullMethodName:       {Role: Admin, Leader: true},
	datav1.ShardingService_MoveBucket_FullMethodName:      {Role: Admin, Leader: true},
	datav1.ShardingService_PinBucket_FullMethodName:       {Role: Admin, Leader: true},
	datav1.ShardingService_SetRebalancer_FullMethodName:   {Role: Admin, Leader: true},
	datav1.ShardingService_Reshard_FullMethodName:         {Role: Admin, Leader: true},

	// Between instances only.
	raftv1.RaftTransportService_RaftMessages_FullMethodName: {Role: Node},
	raftv1.RaftTransportService_RaftSnapshot_FullMethodName: {Role: Node},
	rspb.BucketService_SetBuckets_FullMethodName:            {Role: Node},
	rspb.BucketService_ReceiveBuckets_FullMethodName:        {Role: Node},
	rspb.BucketService_SendBuckets_FullMethodName:           {Role: Node},
	rspb.BucketService_Lookup_FullMethodName:                {Role: Node},
	rspb.BucketService_LookupRange_FullMethodName:           {Role: Node},
	rspb.BucketService_Buckets_FullMethodName:               {Role: Node},
	// A backup reads every bucket and a restore writes them: an admin's.
	rspb.BucketService_BackupBuckets_FullMethodName:  {Role: Admin},
	rspb.BucketService_RestoreBuckets_FullMethodName: {Role: Admin},
}

// Rule returns the role a method needs; false when the table has none
// (users are refused such a method).
func Rule(method string) (Role, bool) {
	m, ok := methods[method]
	return m.Role, ok
}

// LeaderOnly reports whether only group 0's leader serves method; false
// for a method the table does not name.
func LeaderOnly(method string) bool { return methods[method].Leader }
