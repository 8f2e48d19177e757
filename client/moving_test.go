package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// refuseMoving makes f's unary writes refuse as a bucket switching over
// while refusing() says so.
func refuseMoving(f *fakeData, refusing func() bool) {
	f.write = func(_ context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		if refusing() {
			st, _ := status.New(codes.Unavailable, "bucket 3 is sending (replicaset rs1)").
				WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_BUCKET_MOVING, Bucket: 3})
			return nil, st.Err()
		}
		return &datav1.WriteResponse{Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 1}}}, nil
	}
}

// An answer with fewer results than the write had ops is the cluster's
// error, not a panic of the caller indexing them.
func TestAShortWriteAnswerIsAnError(t *testing.T) {
	f := &fakeData{noMulti: true}
	f.write = func(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		return &datav1.WriteResponse{}, nil
	}
	serveData(t, f)
	c := newPipeClient(t, Config{DisablePipelining: true}, f.addr)
	_, err := c.Space(pipeSpace).Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("v")})
	if !errors.Is(err, ErrOutcomeUnknown) || !strings.Contains(err.Error(), "0 results to a write of 1 ops") {
		t.Fatalf("a write answered with no result: %v, want an outcome-unknown error saying so", err)
	}
}

// A bucket in its move's switch is waited out by the router (package
// retry), not a second time by the client: a REASON_BUCKET_MOVING that
// reaches the client is one counted attempt, so a call with Attempts 2
// tries twice and gives up with the bucket's refusal; one whose second
// try is served succeeds.
func TestASwitchReachingTheClientCountsAsAnAttempt(t *testing.T) {
	f := &fakeData{noMulti: true}
	var refusals atomic.Int64
	refuseMoving(f, func() bool { return refusals.Add(1) <= 1 })
	serveData(t, f)
	c := newPipeClient(t, Config{Attempts: 2, RetryBackoff: time.Millisecond, DisablePipelining: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("v")}); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if n := f.unaryWrites.Load(); n != 2 {
		t.Fatalf("%d tries, want 2 (refused as moving, then served)", n)
	}

	g := &fakeData{noMulti: true}
	refuseMoving(g, func() bool { return true })
	serveData(t, g)
	c = newPipeClient(t, Config{Attempts: 2, RetryBackoff: time.Millisecond, DisablePipelining: true}, g.addr)
	_, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("v")})
	var e *Error
	if !errors.As(err, &e) || e.Code != codes.Unavailable || !strings.Contains(e.Msg, "bucket 3 is sending") || ctx.Err() != nil {
		t.Fatalf("a switch that never ends: %v, want the bucket's refusal", err)
	}
	if n := g.unaryWrites.Load(); n != 2 {
		t.Fatalf("%d tries, want Attempts (2): the client does not wait out a switch beyond them", n)
	}
}

// gatedRouting is a fakeData whose GetRouting waits at a gate (or for
// its caller to give up) and counts; with fail set it then refuses.
type gatedRouting struct {
	*fakeData
	gate  chan struct{}
	fail  bool
	reads atomic.Int64
}

func (g *gatedRouting) GetRouting(ctx context.Context, req *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	g.reads.Add(1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if g.fail {
		return nil, status.Error(codes.Unavailable, "no routing here")
	}
	return g.fakeData.GetRouting(ctx, req)
}

// waitJoined waits until n callers wait for c's routing read under way.
func waitJoined(c *Client, n int) {
	for {
		c.rt.mu.Lock()
		f := c.rt.flight
		j := 0
		if f != nil {
			j = f.joined
		}
		c.rt.mu.Unlock()
		if j >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// A shared read that fails is every sharer's answer (one read, not one
// each); one its owner gave up (its context ended) is nobody's: a caller
// waiting for it reads again.
func TestASharedRoutingReadFailsOnceOrIsReadAgain(t *testing.T) {
	f := &fakeData{}
	g := &gatedRouting{fakeData: f, gate: make(chan struct{}), fail: true}
	serveAs(t, f, g)
	c := newPipeClient(t, Config{}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// The owner gives up: the two callers that waited share a new read.
	owner, stop := context.WithCancel(ctx)
	first := make(chan error, 1)
	go func() { _, err := c.refresh(owner); first <- err }()
	for g.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := c.refresh(ctx); errs <- err }()
	}
	waitJoined(c, 2)
	stop()
	if err := <-first; err == nil {
		t.Fatal("the owner's read succeeded after its context ended")
	}
	for g.reads.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	waitJoined(c, 1) // the other caller waits for the second read
	close(g.gate)    // which answers: it fails
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no routing here") {
			t.Fatalf("a caller of the failed shared read: %v, want its failure", err)
		}
	}
	if n := g.reads.Load(); n != 2 {
		t.Fatalf("%d routing reads, want 2 (the abandoned one, and one shared by the two that waited)", n)
	}
}

// Concurrent refreshes of the routing table share reads: callers that
// come while a read is under way wait for it and share the next one (it
// began before them, so it might not show what sent them to refresh).
func TestConcurrentRefreshesShareOneRead(t *testing.T) {
	f := &fakeData{}
	g := &gatedRouting{fakeData: f, gate: make(chan struct{})}
	serveAs(t, f, g)
	c := newPipeClient(t, Config{}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	first := make(chan error, 1)
	go func() { _, err := c.refresh(ctx); first <- err }()
	for g.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Go(func() {
			rt, err := c.refresh(ctx)
			if err == nil && rt == nil {
				err = errors.New("no table and no error")
			}
			errs <- err
		})
	}
	// Every caller waits for the first read (none can be served before
	// the gate opens); then all of them share the second.
	waitJoined(c, 50)
	close(g.gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := g.reads.Load(); n != 2 {
		t.Fatalf("%d routing reads for 51 refreshes, want 2 (the first, and one shared by the 50 that came during it)", n)
	}
}

// movedRouting serves a fakeData whose routing table places every bucket
// on rs1 (served by a) until moved is set, then on rs2 (served by b).
type movedRouting struct {
	*fakeData
	a, b  *fakeData
	moved *atomic.Bool
}

func (m movedRouting) GetRouting(ctx context.Context, req *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	resp, err := m.fakeData.GetRouting(ctx, req)
	if err != nil {
		return nil, err
	}
	rs, addr := "rs1", m.a.addr
	if m.moved.Load() {
		rs, addr = "rs2", m.b.addr
	}
	resp.Buckets = []*datav1.BucketRange{{First: 1, Last: 16, ReplicasetId: rs}}
	resp.Replicasets = []*datav1.ReplicasetRoute{{ReplicasetId: rs, LeaderAddress: addr, Members: []*datav1.Member{{InstanceId: rs + "-i1", Address: addr}}}}
	return resp, nil
}

// A write whose outcome is unknown is retried under its request id
// wherever its bucket is: a replicaset remembers the ids it applied, and a
// bucket's ids move with it (the destination asks the frozen source about
// a write's id, and the copy brings the rest), so the bucket's next
// replicaset answers a retry of a write its source applied instead of
// applying it again.
func TestAnUnknownWriteIsRetriedUnderItsRequestIDWhereverItsBucketIs(t *testing.T) {
	for _, move := range []bool{true, false} {
		a, b := &fakeData{noMulti: true}, &fakeData{noMulti: true}
		var moved, failed atomic.Bool
		var ids sync.Map // the request ids each replicaset saw
		a.write = func(_ context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
			ids.Store("rs1:"+string(req.GetRequestId()), true)
			if failed.CompareAndSwap(false, true) {
				moved.Store(move) // the bucket moves on while the answer is lost
				return nil, status.Error(codes.DeadlineExceeded, "test: the answer was lost")
			}
			if moved.Load() {
				st, _ := status.New(codes.Unavailable, "bucket 3 is GARBAGE on replicaset rs1").
					WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_WRONG_BUCKET, Bucket: 3})
				return nil, st.Err()
			}
			return &datav1.WriteResponse{Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 2}}}, nil
		}
		b.write = func(_ context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
			ids.Store("rs2:"+string(req.GetRequestId()), true)
			return &datav1.WriteResponse{Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 2}}}, nil
		}
		serveAs(t, a, movedRouting{fakeData: a, a: a, b: b, moved: &moved})
		serveAs(t, b, movedRouting{fakeData: b, a: a, b: b, moved: &moved})
		c := newPipeClient(t, Config{Attempts: 3, RetryBackoff: time.Millisecond, DisablePipelining: true}, a.addr)
		_, err := c.Space(pipeSpace).Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("v")})
		if err != nil {
			t.Fatalf("moved %v: %v, want the retry to succeed", move, err)
		}
		var seen []string
		ids.Range(func(k, _ any) bool { seen = append(seen, k.(string)[:3]); return true })
		slices.Sort(seen)
		want := []string{"rs1"}
		if move {
			want = []string{"rs1", "rs2"}
		}
		// One id per replicaset: every attempt carried the same request id.
		if !slices.Equal(seen, want) {
			t.Fatalf("moved %v: the attempts reached %v with their request ids, want one id at each of %v", move, seen, want)
		}
	}
}
