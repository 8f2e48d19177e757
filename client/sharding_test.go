package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// fakeSharding answers RebalanceStatus with a fixed response, and counts.
type fakeSharding struct {
	datav1.UnimplementedShardingServiceServer
	addr  string
	resp  *datav1.RebalanceStatusResponse
	calls atomic.Int64
}

func (f *fakeSharding) RebalanceStatus(context.Context, *datav1.RebalanceStatusRequest) (*datav1.RebalanceStatusResponse, error) {
	f.calls.Add(1)
	return f.resp, nil
}

func serveSharding(t *testing.T, resp *datav1.RebalanceStatusResponse) *fakeSharding {
	t.Helper()
	f := &fakeSharding{resp: resp}
	f.addr = serveGRPC(t, func(s *grpc.Server) { datav1.RegisterShardingServiceServer(s, f) })
	return f
}

// A stale rebalance status (its instance could not confirm its view of
// group 0) sends the client on to its other instances; a stale answer is
// returned only when no instance gives a confirmed one.
func TestAStaleRebalanceStatusIsPassedOverForAConfirmedOne(t *testing.T) {
	stale := serveSharding(t, &datav1.RebalanceStatusResponse{BucketCount: 30, BucketsToMove: 7, Stale: true, StaleReason: "no leader of group 0"})
	fresh := serveSharding(t, &datav1.RebalanceStatusResponse{BucketCount: 30})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	got, err := newClient(t, 2*time.Second, stale.addr, fresh.addr).Sharding().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetStale() || got.GetBucketsToMove() != 0 {
		t.Errorf("got %v, want the confirmed answer", got)
	}
	if stale.calls.Load() != 1 || fresh.calls.Load() != 1 {
		t.Errorf("calls: stale %d, fresh %d; want one each", stale.calls.Load(), fresh.calls.Load())
	}

	// Only stale answers (and a dead instance): the first stale one.
	other := serveSharding(t, &datav1.RebalanceStatusResponse{BucketCount: 30, BucketsToMove: 9, Stale: true, StaleReason: "cannot reach the leader"})
	got, err = newClient(t, 2*time.Second, stale.addr, deadAddr(t), other.addr).Sharding().Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !got.GetStale() || got.GetStaleReason() != "no leader of group 0" || got.GetBucketsToMove() != 7 {
		t.Errorf("got %v, want the first stale answer", got)
	}
	if other.calls.Load() != 1 {
		t.Errorf("the third instance was asked %d times, want once", other.calls.Load())
	}
}
