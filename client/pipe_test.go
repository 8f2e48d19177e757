package client

// Tests of pipelining against a fake DataService (in the package, to see
// the address's pipe: its queue tells when callers wait in it).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

const pipeSpace = "s"

// fakeData is a scripted DataService holding every bucket of a space
// "s" (key unsigned, value string) on one replicaset whose leader it is.
// Unary Writes wait for gate while it is set; Multi serves its items
// concurrently through the same Write and Get, as the router does.
type fakeData struct {
	datav1.UnimplementedDataServiceServer
	addr    string
	lis     *trackingListener
	noMulti bool

	mu      sync.Mutex
	gate    chan struct{} // unary writes wait for it to close (nil: no wait)
	arrived chan struct{} // a unary write that waits for the gate says so

	// write and get answer an item (nil: echo the tuple / the key).
	write func(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error)
	get   func(ctx context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error)
	// multi, when set, answers the Multi instead.
	multi func(ctx context.Context, req *datav1.MultiRequest) (*datav1.MultiResponse, error)

	unaryWrites, unaryGets, multis, multiItems atomic.Int64
}

// trackingListener remembers the connections it accepted, to break them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) breakAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
}

func serveData(t *testing.T, f *fakeData) *fakeData {
	t.Helper()
	serveAs(t, f, f)
	return f
}

// serveAs serves srv (f, or f with more methods) on a new port, which it
// gives to f.
func serveAs(t *testing.T, f *fakeData, srv datav1.DataServiceServer) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.lis = &trackingListener{Listener: lis}
	f.addr = lis.Addr().String()
	s := grpc.NewServer()
	datav1.RegisterDataServiceServer(s, srv)
	go s.Serve(f.lis) //nolint:errcheck // ends with Stop
	t.Cleanup(s.Stop)
}

func (f *fakeData) GetRouting(context.Context, *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	return &datav1.GetRoutingResponse{
		BucketCount: 16,
		Buckets:     []*datav1.BucketRange{{First: 1, Last: 16, ReplicasetId: "rs1"}},
		Replicasets: []*datav1.ReplicasetRoute{{ReplicasetId: "rs1", LeaderAddress: f.addr, Members: []*datav1.Member{{InstanceId: "i1", Address: f.addr}}}},
		Spaces: []*datav1.Space{{Name: pipeSpace, Id: 1, PrimaryKey: []uint32{1}, ShardingKey: []uint32{1}, SchemaVersion: 1,
			Format: []*datav1.Field{{Name: "key", Type: "unsigned"}, {Name: "value", Type: "string"}}}},
		SchemaVersion: 1,
	}, nil
}

func (f *fakeData) Write(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	f.unaryWrites.Add(1)
	f.mu.Lock()
	gate, arrived := f.gate, f.arrived
	f.mu.Unlock()
	if gate != nil {
		select {
		case arrived <- struct{}{}:
			<-gate
		case <-gate:
		}
	}
	return f.serveWrite(ctx, req)
}

// closeGate makes unary writes wait at a new gate until the returned
// channel is closed; each says so on arrived.
func (f *fakeData) closeGate() (gate, arrived chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate, f.arrived = make(chan struct{}), make(chan struct{})
	return f.gate, f.arrived
}

func (f *fakeData) serveWrite(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	if f.write != nil {
		return f.write(ctx, req)
	}
	return &datav1.WriteResponse{Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 1}}}, nil
}

func (f *fakeData) Get(ctx context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
	f.unaryGets.Add(1)
	return f.serveGet(ctx, req)
}

func (f *fakeData) serveGet(ctx context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
	if f.get != nil {
		return f.get(ctx, req)
	}
	return &datav1.GetResponse{Found: true, Tuple: req.GetKey(), Version: 2, Info: &datav1.ReadInfo{Leader: true}}, nil
}

func (f *fakeData) Multi(ctx context.Context, req *datav1.MultiRequest) (*datav1.MultiResponse, error) {
	f.multis.Add(1)
	if f.noMulti {
		return nil, status.Error(codes.Unimplemented, "unknown method Multi for service shardkit.data.v1.DataService")
	}
	f.multiItems.Add(int64(len(req.GetItems())))
	if f.multi != nil {
		return f.multi(ctx, req)
	}
	out := &datav1.MultiResponse{Results: make([]*datav1.MultiResult, len(req.GetItems()))}
	var wg sync.WaitGroup
	for i, it := range req.GetItems() {
		wg.Go(func() {
			if w := it.GetWrite(); w != nil {
				resp, err := f.serveWrite(ctx, w)
				out.Results[i] = datav1.ResultOf(resp, err)
			} else {
				resp, err := f.serveGet(ctx, it.GetGet())
				out.Results[i] = datav1.ResultOf(resp, err)
			}
		})
	}
	wg.Wait()
	return out, nil
}

func newPipeClient(t *testing.T, cfg Config, peers ...string) *Client {
	t.Helper()
	cfg.Peers = peers
	c, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pipeOf returns the client's pipe to addr, made now.
func pipeOf(t *testing.T, c *Client, addr string) *pipe {
	t.Helper()
	conn, err := c.Conn(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.dataClient(addr, conn).(*pipe)
	if !ok {
		t.Fatal("pipelining is off")
	}
	return p
}

// fillThenQueue holds all DefaultPipelineDepth slots of the client's pipe to f
// with unary writes that wait at f's gate, starts the calls of queued
// (which therefore join the queue), waits until all of them are queued,
// runs beforeOpen (when not nil) and opens the gate. It returns when the
// slot holders are answered.
func fillThenQueue(ctx context.Context, t *testing.T, c *Client, f *fakeData, queued []func(), beforeOpen func()) {
	t.Helper()
	p := pipeOf(t, c, f.addr)
	gate, arrived := f.closeGate()
	allQueued := make(chan struct{})
	p.mu.Lock()
	p.queued = func(n int) {
		if n == len(queued) {
			close(allQueued)
		}
	}
	p.mu.Unlock()
	var holders sync.WaitGroup
	for i := range DefaultPipelineDepth {
		holders.Go(func() {
			if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(uint64(1000 + i)), tuple.String("holder")}); err != nil {
				t.Errorf("slot holder %d: %v", i, err)
			}
		})
	}
	for range DefaultPipelineDepth {
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("the slot holders did not reach the server")
		}
	}
	for _, q := range queued {
		go q()
	}
	select {
	case <-allQueued:
	case <-ctx.Done():
		t.Fatal("the calls did not queue")
	}
	p.mu.Lock()
	p.queued = nil
	p.mu.Unlock()
	if beforeOpen != nil {
		beforeOpen()
	}
	close(gate)
	holders.Wait()
}

func TestPipelineGivesEachCallerItsOwnAnswer(t *testing.T) {
	t.Parallel()
	f := serveData(t, &fakeData{})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, PipelineWrites: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const n = 100
	type answer struct {
		r   Result
		err error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	calls := make([]func(), n)
	for i := range n {
		wg.Add(1)
		calls[i] = func() {
			defer wg.Done()
			if i%2 == 0 {
				answers[i].r, answers[i].err = c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String(fmt.Sprint("v", i))})
			} else {
				answers[i].r, _, answers[i].err = c.Space(pipeSpace).Select(ctx, []tuple.Value{tuple.Uint(uint64(i))}, RW)
			}
		}
	}
	fillThenQueue(ctx, t, c, f, calls, nil)
	wg.Wait()
	for i, a := range answers {
		if a.err != nil {
			t.Errorf("call %d: %v", i, a.err)
			continue
		}
		want := tuple.Tuple{tuple.Uint(uint64(i)), tuple.String(fmt.Sprint("v", i))}
		if i%2 == 1 {
			want = tuple.Tuple{tuple.Uint(uint64(i))} // the fake's get echoes the key
		}
		if fmt.Sprint(a.r.Tuple) != fmt.Sprint(want) {
			t.Errorf("call %d got %v, want its own %v", i, a.r.Tuple, want)
		}
	}
	if m, items := f.multis.Load(), f.multiItems.Load(); m != 1 || items != n {
		t.Errorf("the queued calls went in %d Multis of %d items in all, want 1 of %d", m, items, n)
	}
	if w, g := f.unaryWrites.Load(), f.unaryGets.Load(); w != DefaultPipelineDepth || g != 0 {
		t.Errorf("unary calls: %d writes, %d gets; want only the %d slot holders'", w, g, DefaultPipelineDepth)
	}
}

func TestPipelineARefusalOrRedirectIsThatItemsAlone(t *testing.T) {
	t.Parallel()
	// other serves the reads redirected to it.
	other := serveData(t, &fakeData{get: func(context.Context, *datav1.GetRequest) (*datav1.GetResponse, error) {
		return &datav1.GetResponse{Found: true, Tuple: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(9), tuple.String("elsewhere")}), Info: &datav1.ReadInfo{Leader: true}}, nil
	}})
	f := serveData(t, &fakeData{})
	f.write = func(_ context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		t, _ := tuple.DecodeTuple(req.GetOps()[0].GetTuple())
		if len(t) > 0 && t[0] == tuple.Uint(7) {
			st, _ := status.New(codes.AlreadyExists, "space s: duplicate key [7]").WithDetails(&datav1.Refusal{Code: datav1.Refusal_CODE_DUPLICATE_KEY})
			return nil, st.Err()
		}
		return &datav1.WriteResponse{Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 1}}}, nil
	}
	f.get = func(_ context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
		k, _ := tuple.DecodeTuple(req.GetKey())
		if k[0] == tuple.Uint(9) {
			st, _ := status.New(codes.Unavailable, "not the leader").WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_NOT_LEADER, ReplicasetId: "rs1", LeaderAddress: other.addr})
			return nil, st.Err()
		}
		return &datav1.GetResponse{Found: true, Tuple: req.GetKey(), Info: &datav1.ReadInfo{Leader: true}}, nil
	}
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, PipelineWrites: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var insertErr, okErr, redirectedErr, getErr error
	var redirected, got Result
	var wg sync.WaitGroup
	wg.Add(4)
	fillThenQueue(ctx, t, c, f, []func(){
		func() {
			defer wg.Done()
			_, insertErr = c.Space(pipeSpace).Insert(ctx, tuple.Tuple{tuple.Uint(7), tuple.String("x")})
		},
		func() {
			defer wg.Done()
			_, okErr = c.Space(pipeSpace).Insert(ctx, tuple.Tuple{tuple.Uint(8), tuple.String("y")})
		},
		func() {
			defer wg.Done()
			redirected, _, redirectedErr = c.Space(pipeSpace).Select(ctx, []tuple.Value{tuple.Uint(9)}, RW)
		},
		func() {
			defer wg.Done()
			got, _, getErr = c.Space(pipeSpace).Select(ctx, []tuple.Value{tuple.Uint(10)}, RW)
		},
	}, nil)
	wg.Wait()
	var e *Error
	if !errors.Is(insertErr, ErrAlreadyExists) || !errors.As(insertErr, &e) || e.OpIndex != 1 || e.Retryable {
		t.Errorf("the refused insert: %v, want ErrAlreadyExists naming op 1, not retryable", insertErr)
	}
	if okErr != nil || getErr != nil || got.Tuple[0] != tuple.Uint(10) {
		t.Errorf("the items beside the refusal: insert %v, get %v %v; want them served", okErr, got, getErr)
	}
	if redirectedErr != nil || len(redirected.Tuple) != 2 || redirected.Tuple[1] != tuple.String("elsewhere") {
		t.Errorf("the redirected get: %v %v, want it followed to the leader it names", redirected, redirectedErr)
	}
	if f.multis.Load() != 1 || f.multiItems.Load() != 4 {
		t.Errorf("%d Multis of %d items, want 1 of 4", f.multis.Load(), f.multiItems.Load())
	}
}

func TestPipelineACallerWhoseContextEndsStopsWaiting(t *testing.T) {
	t.Parallel()
	f := serveData(t, &fakeData{})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, PipelineWrites: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// 1. Cancelled while queued: the caller returns at once, before any
	// slot frees (its item is then skipped, never sent).
	qctx, qcancel := context.WithCancel(ctx)
	var leftErr error
	left := make(chan struct{})
	fillThenQueue(ctx, t, c, f, []func(){
		func() {
			defer close(left)
			_, leftErr = c.Space(pipeSpace).Replace(qctx, tuple.Tuple{tuple.Uint(1), tuple.String("gone")})
		},
	}, func() {
		qcancel()
		<-left
	})
	if !errors.Is(leftErr, ErrOutcomeUnknown) || status.Code(leftErr) != codes.Canceled {
		t.Errorf("the caller that left: %v, want ErrOutcomeUnknown (Canceled)", leftErr)
	}
	if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(2), tuple.String("here")}); err != nil {
		t.Errorf("a call after: %v", err)
	}
	// The item that was left was never sent: the slot holders and the
	// call after are the only writes the instance saw.
	if w, m := f.unaryWrites.Load(), f.multis.Load(); w != DefaultPipelineDepth+1 || m != 0 {
		t.Errorf("%d unary writes and %d Multis, want %d and 0 (the abandoned item skipped)", w, m, DefaultPipelineDepth+1)
	}

	// 2. Cancelled while its Multi is under way: the caller returns; the
	// Multi's late answer goes nowhere and blocks nobody.
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	f.multi = func(_ context.Context, req *datav1.MultiRequest) (*datav1.MultiResponse, error) {
		held <- struct{}{}
		<-hold
		out := &datav1.MultiResponse{}
		for range req.GetItems() {
			out.Results = append(out.Results, datav1.ResultOf(&datav1.WriteResponse{Results: []*datav1.OpResult{{}}}, nil))
		}
		return out, nil
	}
	mctx, mcancel := context.WithCancel(ctx)
	errs := make(chan error, 2)
	fillThenQueue(ctx, t, c, f, []func(){
		func() {
			_, err := c.Space(pipeSpace).Replace(mctx, tuple.Tuple{tuple.Uint(3), tuple.String("a")})
			errs <- err
		},
		func() {
			_, err := c.Space(pipeSpace).Replace(mctx, tuple.Tuple{tuple.Uint(4), tuple.String("b")})
			errs <- err
		},
	}, nil)
	<-held
	mcancel()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("a caller that left during its Multi: %v, want ErrOutcomeUnknown", err)
		}
	}
	close(hold)
	// The pipe still works.
	if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(5), tuple.String("c")}); err != nil {
		t.Errorf("a call after: %v", err)
	}
}

func TestPipelineABrokenConnectionIsOutcomeUnknownForWrites(t *testing.T) {
	t.Parallel()
	f := serveData(t, &fakeData{})
	// The Multi goes out when the first slot holder's answer frees a slot;
	// the other holder's answer may still be on its way on the same
	// connection. The instance dies only once the client has both, or the
	// break would fail a holder too (it did, once in CI).
	holdersAnswered := make(chan struct{})
	f.multi = func(ctx context.Context, _ *datav1.MultiRequest) (*datav1.MultiResponse, error) {
		select {
		case <-holdersAnswered:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.lis.breakAll() // the instance dies with the Multi received
		<-ctx.Done()
		return nil, ctx.Err()
	}
	// One attempt: the error is the Multi's own, not a retry's.
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, Attempts: 1, PipelineWrites: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 3)
	var calls []func()
	for i := range 3 {
		calls = append(calls, func() {
			_, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String("v")})
			errs <- err
		})
	}
	fillThenQueue(ctx, t, c, f, calls, nil)
	close(holdersAnswered)
	for range 3 {
		err := <-errs
		if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrUnavailable) || !IsRetryable(err) {
			t.Errorf("a write whose Multi's connection broke: %v; want ErrOutcomeUnknown, retryable (request ids)", err)
		}
	}
	if f.multis.Load() != 1 {
		t.Errorf("%d Multis, want 1", f.multis.Load())
	}
}

func TestPipelineFallsBackToUnaryCallsWithoutMulti(t *testing.T) {
	t.Parallel()
	f := serveData(t, &fakeData{noMulti: true})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, PipelineWrites: true}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	round := func() {
		const n = 20
		errs := make(chan error, n)
		var calls []func()
		for i := range n {
			calls = append(calls, func() {
				r, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String("v")})
				if err == nil && r.Tuple[0] != tuple.Uint(uint64(i)) {
					err = fmt.Errorf("call %d got %v", i, r.Tuple)
				}
				errs <- err
			})
		}
		fillThenQueue(ctx, t, c, f, calls, nil)
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("without Multi: %v", err)
			}
		}
	}
	round()
	if f.multis.Load() != 1 || f.unaryWrites.Load() != DefaultPipelineDepth+20 {
		t.Fatalf("%d Multis tried, %d unary writes; want 1 tried, then each item unary", f.multis.Load(), f.unaryWrites.Load())
	}
	if !pipeOf(t, c, f.addr).unaryOnly.Load() {
		t.Fatal("the pipe did not remember the instance has no Multi")
	}
	// From then on, no Multi is tried: every call is unary, at once.
	var wg sync.WaitGroup
	gate, arrived := f.closeGate()
	for i := range 2 * DefaultPipelineDepth {
		wg.Go(func() {
			if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String("v")}); err != nil {
				t.Errorf("unary after the fallback: %v", err)
			}
		})
	}
	for range 2 * DefaultPipelineDepth { // more than the pipe's slots reach the server together
		<-arrived
	}
	close(gate)
	wg.Wait()
	if f.multis.Load() != 1 {
		t.Errorf("%d Multis tried, want still 1", f.multis.Load())
	}
}

func TestPipeliningCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	writesAllReachTheServer(t, Config{DisablePipelining: true, PipelineWrites: true})
}

// Writes stay out of the pipeline unless the Client asks for them.
func TestPipelineLeavesWritesOutByDefault(t *testing.T) {
	t.Parallel()
	writesAllReachTheServer(t, Config{})
}

// writesAllReachTheServer makes more concurrent writes than a pipe has
// slots on a Client with cfg and checks that they reach the server
// together, none queued, as unary calls.
func writesAllReachTheServer(t *testing.T, cfg Config) {
	t.Helper()
	f := serveData(t, &fakeData{})
	cfg.Timeout = 10 * time.Second
	c := newPipeClient(t, cfg, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const n = 3 * DefaultPipelineDepth
	gate, arrived := f.closeGate()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String("v")}); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	for range n { // all of them reach the server at once: none queued
		select {
		case <-arrived:
		case <-ctx.Done():
			t.Fatal("the calls did not all reach the server: queued?")
		}
	}
	close(gate)
	wg.Wait()
	if m, w := f.multis.Load(), f.unaryWrites.Load(); m != 0 || w != n {
		t.Errorf("%d Multis and %d unary writes, want 0 and %d", m, w, n)
	}
}
