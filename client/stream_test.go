package client

// Tests of the data stream against a fake DataService with Stream.

import (
	"context"
	"errors"
	"fmt"
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

// streamData is fakeData with a Stream that answers each request's calls
// in reverse order, after hold (when set) lets it.
type streamData struct {
	*fakeData
	streams, requests, calls atomic.Int64
	hold                     chan struct{} // requests wait for it to close (nil: no wait)
	arrived                  chan struct{} // a request that waits says so (when hold is set)
	timeouts                 chan uint32   // each call's timeout, when set
}

func serveStreamData(t *testing.T, f *streamData) *streamData {
	t.Helper()
	serveAs(t, f.fakeData, f)
	return f
}

func (f *streamData) Stream(ss datav1.DataService_StreamServer) error {
	f.streams.Add(1)
	var sendMu sync.Mutex
	for {
		req, err := ss.Recv()
		if err != nil {
			return err
		}
		f.requests.Add(1)
		f.calls.Add(int64(len(req.GetCalls())))
		go func() {
			if f.hold != nil {
				select {
				case f.arrived <- struct{}{}:
				default:
				}
				<-f.hold
			}
			resp := &datav1.StreamResponse{}
			for _, c := range slices.Backward(req.GetCalls()) {
				if f.timeouts != nil {
					f.timeouts <- c.GetTimeoutMs()
				}
				var res *datav1.MultiResult
				if w := c.GetItem().GetWrite(); w != nil {
					res = datav1.ResultOf(f.serveWrite(ss.Context(), w))
				} else {
					res = datav1.ResultOf(f.serveGet(ss.Context(), c.GetItem().GetGet()))
				}
				resp.Replies = append(resp.Replies, &datav1.StreamReply{Id: c.GetId(), Result: res})
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			_ = ss.Send(resp)
		}()
	}
}

// Concurrent calls on one Client go on one stream, and each caller gets
// its own answer (the fake answers in reverse
// order, and refuses odd keys), with no unary call and no Multi.
func TestStreamGivesEachCallerItsOwnAnswer(t *testing.T) {
	t.Parallel()
	f := serveStreamData(t, &streamData{fakeData: &fakeData{}})
	f.get = func(_ context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
		k, err := tuple.DecodeTuple(req.GetKey())
		if err != nil {
			return nil, err
		}
		if u := uintOf(k[0]); u%2 == 1 {
			return nil, status.Errorf(codes.FailedPrecondition, "odd key %d", u)
		}
		return &datav1.GetResponse{Found: true, Tuple: req.GetKey(), Version: uintOf(k[0]), Info: &datav1.ReadInfo{Leader: true}}, nil
	}
	c := newPipeClient(t, Config{Timeout: 10 * time.Second}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k := uint64(i)
			if i%3 == 0 {
				r, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String("v")})
				if err != nil || uintOf(r.Tuple[0]) != k {
					t.Errorf("replace %d: %v, %v", k, r, err)
				}
				return
			}
			r, _, err := c.Space(pipeSpace).Select(ctx, tuple.Tuple{tuple.Uint(k)}, RW)
			switch {
			case k%2 == 1 && (err == nil || !strings.Contains(err.Error(), fmt.Sprintf("odd key %d", k))):
				t.Errorf("get %d: %+v, %v; want its own refusal", k, r, err)
			case k%2 == 0 && (err != nil || r.Version != k):
				t.Errorf("get %d: %+v, %v", k, r, err)
			}
		})
	}
	wg.Wait()
	if f.streams.Load() != 1 || f.calls.Load() < n || f.unaryGets.Load()+f.unaryWrites.Load()+f.multis.Load() != 0 {
		t.Errorf("%d streams, %d calls in %d requests, %d unary gets, %d unary writes, %d Multis; want 1 stream carrying every call",
			f.streams.Load(), f.calls.Load(), f.requests.Load(), f.unaryGets.Load(), f.unaryWrites.Load(), f.multis.Load())
	}
	t.Logf("%d calls in %d requests", f.calls.Load(), f.requests.Load())
}

func uintOf(v tuple.Value) uint64 {
	u, _ := v.AsUint()
	return u
}

// A call carries its caller's deadline as its timeout.
func TestStreamCarriesTheDeadline(t *testing.T) {
	t.Parallel()
	f := serveStreamData(t, &streamData{fakeData: &fakeData{}, timeouts: make(chan uint32, 1)})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, Attempts: 1}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, _, err := c.Space(pipeSpace).Select(ctx, tuple.Tuple{tuple.Uint(2)}, RW); err != nil {
		t.Fatal(err)
	}
	if ms := <-f.timeouts; ms == 0 || ms > 3000 {
		t.Errorf("timeout %d ms, want (0, 3000]", ms)
	}
}

// A stream that breaks fails every call waiting on it: a write's outcome
// is unknown, as after a broken unary call, and retryable (request ids);
// the next call opens a new stream.
func TestStreamABrokenStreamIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	f := serveStreamData(t, &streamData{fakeData: &fakeData{}, hold: make(chan struct{}), arrived: make(chan struct{}, 1)})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, Attempts: 1}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	p := pipeOf(t, c, f.addr)
	done := make(chan error, 1)
	go func() {
		_, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("v")})
		done <- err
	}()
	select {
	case <-f.arrived:
	case <-ctx.Done():
		t.Fatal("the write did not reach the server")
	}
	f.lis.breakAll()
	err := <-done
	if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrUnavailable) || !IsRetryable(err) {
		t.Fatalf("a write on a broken stream: %v; want ErrOutcomeUnknown, retryable (request ids)", err)
	}
	close(f.hold)
	if _, _, err := c.Space(pipeSpace).Select(ctx, tuple.Tuple{tuple.Uint(2)}, RW); err != nil {
		t.Fatalf("a call after the break: %v", err)
	}
	if n := f.streams.Load(); n != 2 {
		t.Errorf("%d streams, want 2 (one broken, one new)", n)
	}
	if p.stream.unimplemented.Load() {
		t.Error("a broken stream was taken for an instance without Stream")
	}
}

// An instance without Stream gets the pipeline's calls, from the first
// call on: the stream is tried once.
func TestStreamFallsBackToThePipelineWithoutStream(t *testing.T) {
	t.Parallel()
	f := serveData(t, &fakeData{})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second}, f.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for k := range uint64(5) {
		if _, err := c.Space(pipeSpace).Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String("v")}); err != nil {
			t.Fatalf("replace %d: %v", k, err)
		}
		if r, _, err := c.Space(pipeSpace).Select(ctx, tuple.Tuple{tuple.Uint(k)}, RW); err != nil || !r.Found {
			t.Fatalf("get %d: %+v, %v", k, r, err)
		}
	}
	if w, g := f.unaryWrites.Load(), f.unaryGets.Load(); w != 5 || g != 5 {
		t.Errorf("%d unary writes and %d unary gets, want 5 and 5", w, g)
	}
	if !pipeOf(t, c, f.addr).stream.unimplemented.Load() {
		t.Error("the pipe does not remember that the instance has no Stream")
	}
}

// With DisableStream the calls go as the pipeline sends them.
func TestStreamCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	f := serveStreamData(t, &streamData{fakeData: &fakeData{}})
	c := newPipeClient(t, Config{Timeout: 10 * time.Second, DisableStream: true}, f.addr)
	if _, err := c.Space(pipeSpace).Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("v")}); err != nil {
		t.Fatal(err)
	}
	if f.streams.Load() != 0 || f.unaryWrites.Load() != 1 {
		t.Errorf("%d streams, %d unary writes; want 0 and 1", f.streams.Load(), f.unaryWrites.Load())
	}
}
