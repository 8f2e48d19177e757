package server_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

func getStatus(addr string) (*clusterv1.GetStatusResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return clusterv1.NewClusterServiceClient(conn).GetStatus(ctx, &clusterv1.GetStatusRequest{})
}

// Three instances run in this process (the multi-process tests of the real
// binary are in tests/integration): they form one cluster, with raft ids
// 1, 2 and 3, all Online and all voters; then they stop gracefully.
func TestThreeInstancesFormOneCluster(t *testing.T) {
	var addrs []string
	var liss []net.Listener
	for range 3 {
		l, a := servertest.Listen(t)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	var dones []<-chan error
	for i := range addrs {
		dones = append(dones, servertest.Run(t, server.InstanceConfig{
			Listener: liss[i], Peers: addrs, AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
		}))
	}
	deadline := time.Now().Add(60 * time.Second)
	var st *clusterv1.GetStatusResponse
	for {
		var err error
		st, err = getStatus(addrs[0])
		if err == nil && len(st.GetInstances()) == 3 && len(st.GetVoters()) == 3 {
			online := 0
			for _, is := range st.GetInstances() {
				if is.GetInstance().GetCurrentGrade().GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE {
					online++
				}
			}
			if online == 3 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not 3 instances Online and voting after 60s: %v (%v)", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ids := map[uint64]bool{}
	for _, is := range st.GetInstances() {
		ids[is.GetInstance().GetRaftId()] = true
	}
	if !ids[1] || !ids[2] || !ids[3] {
		t.Fatalf("raft ids %v, want 1, 2, 3", ids)
	}
	for i, done := range dones {
		select {
		case err := <-done:
			t.Fatalf("instance %d ended while the cluster ran: %v", i, err)
		default:
		}
	}
}
