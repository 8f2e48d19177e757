package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// movingData is two fake instances, leaders of rs1 and rs2, that agree on
// a routing table: every bucket on rs1 until rs1 refuses a write as a
// bucket it no longer holds, on rs2 after.
type movingData struct {
	*fakeData
	moved    *atomic.Bool
	rs1, rs2 *fakeData
}

func (m movingData) GetRouting(ctx context.Context, req *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	resp, err := m.fakeData.GetRouting(ctx, req)
	if err != nil {
		return nil, err
	}
	holder := m.rs1
	resp.Buckets[0].ReplicasetId = "rs1"
	if m.moved.Load() {
		holder = m.rs2
		resp.Buckets[0].ReplicasetId = "rs2"
	}
	id := resp.GetBuckets()[0].GetReplicasetId()
	resp.Replicasets = []*datav1.ReplicasetRoute{{ReplicasetId: id, LeaderAddress: holder.addr, Members: []*datav1.Member{{InstanceId: id, Address: holder.addr}}}}
	return resp, nil
}

// A write refused by a replicaset its bucket has left goes at once to
// where the refreshed routing table places the bucket. Its backoff is an
// hour here: a client that waited before it would not finish.
func TestAWriteFollowsAMovedBucketWithoutWaiting(t *testing.T) {
	var moved atomic.Bool
	rs1, rs2 := &fakeData{noMulti: true}, &fakeData{noMulti: true}
	rs1.write = func(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		moved.Store(true)
		st, _ := status.New(codes.FailedPrecondition, "bucket 3 is not on rs1").
			WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_WRONG_BUCKET, Bucket: 3, ReplicasetId: "rs1"})
		return nil, st.Err()
	}
	serveAs(t, rs1, movingData{fakeData: rs1, moved: &moved, rs1: rs1, rs2: rs2})
	serveAs(t, rs2, movingData{fakeData: rs2, moved: &moved, rs1: rs1, rs2: rs2})
	c := newPipeClient(t, Config{RetryBackoff: time.Hour, DisablePipelining: true}, rs1.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("v")}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if n1, n2 := rs1.unaryWrites.Load(), rs2.unaryWrites.Load(); n1 != 1 || n2 != 1 {
		t.Fatalf("writes on rs1 %d, on rs2 %d; want one each", n1, n2)
	}
}

// An attempt is bounded by Config.Timeout: by the caller's own context
// when its deadline comes first (nothing derived), by a child with the
// attempt's deadline otherwise.
func TestAnAttemptTakesTheEarlierOfTheCallersDeadlineAndTheTimeout(t *testing.T) {
	const timeout = time.Minute
	soon, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	actx, stop := attemptContext(soon, timeout)
	stop()
	if actx != soon {
		t.Fatal("a caller's deadline before the attempt's timeout: the attempt should run under the caller's context")
	}
	if soon.Err() != nil {
		t.Fatal("stopping an attempt that runs under the caller's context cancelled the caller's context")
	}
	for name, parent := range map[string]context.Context{"no deadline": context.Background(), "a later deadline": func() context.Context {
		late, cancel := context.WithTimeout(context.Background(), time.Hour)
		t.Cleanup(cancel)
		return late
	}()} {
		actx, stop := attemptContext(parent, timeout)
		dl, ok := actx.Deadline()
		if !ok || time.Until(dl) > timeout {
			t.Fatalf("%s: the attempt's deadline is %v (set %v), want within %v", name, time.Until(dl), ok, timeout)
		}
		stop()
		if actx.Err() == nil {
			t.Fatalf("%s: stopping the attempt left its context running", name)
		}
	}
}
