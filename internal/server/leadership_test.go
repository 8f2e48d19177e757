package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

// A replicaset's new leader is recorded in group 0 because it reports
// itself (ReportReplicasetLeader), not because the governor's periodic
// recheck finds it: with the recheck an hour apart, a leadership transfer
// in the replicaset's group is still recorded.
func TestANewReplicasetLeaderIsRecordedOnItsOwnReport(t *testing.T) {
	var addrs []string
	var liss []net.Listener
	for range 3 {
		l, a := servertest.Listen(t)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	for i := range addrs {
		servertest.Run(t, server.InstanceConfig{
			Listener: liss[i], Peers: addrs, InitReplicationFactor: 3,
			AutoOfflineTimeout: 30 * time.Second, ShutdownTimeout: 5 * time.Second,
			Timeouts: cluster.Timeouts{LeaderRecheck: time.Hour},
		})
	}
	// recorded waits for group 0 to record a leader of the replicaset
	// that is not `not`, and returns it with its address and raft group.
	recorded := func(not string) (leader, addr string, group uint64, raftIDs map[string]uint64) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			st, err := getStatus(addrs[0])
			if err == nil && len(st.GetReplicasets()) == 1 && len(st.GetInstances()) == 3 {
				rs := st.GetReplicasets()[0].GetReplicaset()
				raftIDs = map[string]uint64{}
				online := 0
				for _, is := range st.GetInstances() {
					i := is.GetInstance()
					raftIDs[i.GetInstanceId()] = i.GetRaftId()
					if i.GetInstanceId() == rs.GetLeaderInstanceId() {
						addr = i.GetAddress()
					}
					if i.GetCurrentGrade().GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE {
						online++
					}
				}
				if online == 3 && rs.GetLeaderInstanceId() != "" && rs.GetLeaderInstanceId() != not && addr != "" {
					return rs.GetLeaderInstanceId(), addr, rs.GetRaftGroupId(), raftIDs
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("group 0 records no replicaset leader other than %q after 60s: %v (%v)", not, st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	first, addr, group, raftIDs := recorded("")
	var to uint64
	for id, r := range raftIDs {
		if id != first {
			to = r
			break
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := clusterv1.NewClusterServiceClient(conn).GroupAdmin(ctx, &clusterv1.GroupAdminRequest{
		GroupId: group, Action: clusterv1.GroupAdminAction_GROUP_ADMIN_ACTION_TRANSFER_LEADERSHIP, RaftId: to}); err != nil {
		t.Fatalf("transfer the replicaset's leadership from %s to raft id %d: %v", first, to, err)
	}
	if now, _, _, _ := recorded(first); raftIDs[now] != to {
		t.Fatalf("group 0 records %s (raft id %d) as the leader, want raft id %d, the transfer's target", now, raftIDs[now], to)
	}
}
