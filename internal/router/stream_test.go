package router

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// fakeStream is the server side of a Stream: it hands the handler its
// requests, then io.EOF (the client closed its side), and keeps what the
// handler sends.
type fakeStream struct {
	grpc.ServerStream // methods the tests do not reach panic
	ctx               context.Context
	in                []*datav1.StreamRequest

	mu   sync.Mutex
	sent []*datav1.StreamResponse
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) Recv() (*datav1.StreamRequest, error) {
	if len(s.in) == 0 {
		return nil, io.EOF
	}
	req := s.in[0]
	s.in = s.in[1:]
	return req, nil
}

func (s *fakeStream) Send(resp *datav1.StreamResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, resp)
	return nil
}

// A Stream's calls are each answered by their id, the refused one with
// its access check's refusal and the others with what their unary call
// answers (a write forwarded to its replicaset's leader), every call is
// reported as its unary method, and a client that closes its side still
// gets every answer before the stream ends.
func TestStreamAnswersEachCallByIDBeforeItEnds(t *testing.T) {
	topo := &fakeGroupZero{holder: "r2"}
	var mu sync.Mutex
	var calls []string
	type observed struct {
		method string
		code   codes.Code
	}
	var seen []observed
	r := New(Config{
		GroupZero: topo,
		Dial: func(addr string) (grpc.ClientConnInterface, error) {
			return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error { return nil }}, nil
		},
		AuthorizeItem: func(_ context.Context, it *datav1.MultiItem) error {
			if it.GetWrite().GetBucket() == 6 {
				return status.Error(codes.PermissionDenied, "user may not write bucket 6")
			}
			return nil
		},
		ObserveCall: func(method string, code codes.Code, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, observed{method, code})
		},
	})
	write := func(id uint64, bucket uint32) *datav1.StreamCall {
		return &datav1.StreamCall{Id: id, TimeoutMs: 5000, Item: &datav1.MultiItem{Op: &datav1.MultiItem_Write{Write: &datav1.WriteRequest{Bucket: bucket}}}}
	}
	ss := &fakeStream{ctx: t.Context(), in: []*datav1.StreamRequest{
		{Calls: []*datav1.StreamCall{write(10, 5), write(11, 6)}},
		{Calls: []*datav1.StreamCall{write(12, 5)}},
	}}
	if err := r.Stream(ss); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	got := map[uint64]*datav1.MultiResult{}
	for _, resp := range ss.sent {
		for _, rep := range resp.GetReplies() {
			if _, dup := got[rep.GetId()]; dup {
				t.Errorf("call %d answered twice", rep.GetId())
			}
			got[rep.GetId()] = rep.GetResult()
		}
	}
	for _, id := range []uint64{10, 12} {
		if w := got[id].GetWrite(); w.GetIndex() != 7 {
			t.Errorf("call %d: %v, want the forwarded write's answer (index 7)", id, got[id])
		}
	}
	if st := status.FromProto(got[11].GetError()); st.Code() != codes.PermissionDenied || st.Message() != "user may not write bucket 6" {
		t.Errorf("call 11: %v, want its refusal", got[11])
	}
	if len(got) != 3 {
		t.Errorf("%d calls answered, want 3", len(got))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 2 || calls[0] != "r2-leader" || calls[1] != "r2-leader" {
		t.Errorf("forwarded to %v, want r2's leader twice (the refused call not at all)", calls)
	}
	counts := map[observed]int{}
	for _, o := range seen {
		counts[o]++
	}
	if counts[observed{datav1.DataService_Write_FullMethodName, codes.OK}] != 2 || counts[observed{datav1.DataService_Write_FullMethodName, codes.PermissionDenied}] != 1 || len(seen) != 3 {
		t.Errorf("observed %v, want two OK writes and a PermissionDenied one", seen)
	}
}

// A request over the limit ends the stream with InvalidArgument naming it.
func TestStreamRefusesARequestOverTheLimit(t *testing.T) {
	r := New(Config{GroupZero: &fakeGroupZero{holder: "r1"}})
	big := &datav1.StreamRequest{}
	for i := range datav1.MaxMultiItems + 1 {
		big.Calls = append(big.Calls, &datav1.StreamCall{Id: uint64(i)})
	}
	err := r.Stream(&fakeStream{ctx: t.Context(), in: []*datav1.StreamRequest{big}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 calls") {
		t.Errorf("a request of %d calls: %v, want InvalidArgument naming the limit", len(big.Calls), err)
	}
}

// A Multi's items are checked one by one: one refused alone is answered
// with its refusal and never served, and the others are.
func TestMultiChecksEachItem(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	r := New(Config{
		GroupZero: &fakeGroupZero{holder: "r2"},
		Dial: func(addr string) (grpc.ClientConnInterface, error) {
			return &fakeConn{addr: addr, calls: &calls, mu: &mu, next: func() error { return nil }}, nil
		},
		AuthorizeItem: func(_ context.Context, it *datav1.MultiItem) error {
			if it.GetWrite().GetBucket() == 6 {
				return status.Error(codes.PermissionDenied, "user may not write bucket 6")
			}
			return nil
		},
	})
	write := func(bucket uint32) *datav1.MultiItem {
		return &datav1.MultiItem{Op: &datav1.MultiItem_Write{Write: &datav1.WriteRequest{Bucket: bucket}}}
	}
	for _, tc := range []struct {
		items []*datav1.MultiItem
		want  []codes.Code
	}{
		{[]*datav1.MultiItem{write(6)}, []codes.Code{codes.PermissionDenied}},
		{[]*datav1.MultiItem{write(5), write(6), write(5)}, []codes.Code{codes.OK, codes.PermissionDenied, codes.OK}},
	} {
		mu.Lock()
		calls = nil
		mu.Unlock()
		resp, err := r.Multi(t.Context(), &datav1.MultiRequest{Items: tc.items})
		if err != nil {
			t.Fatal(err)
		}
		served := 0
		for i, res := range resp.GetResults() {
			if c := codes.Code(res.GetError().GetCode()); c != tc.want[i] {
				t.Errorf("%d items: item %d: %v, want %v", len(tc.items), i+1, res, tc.want[i])
			}
			if tc.want[i] == codes.OK {
				served++
			}
		}
		mu.Lock()
		if len(calls) != served {
			t.Errorf("%d items: %d forwarded, want %d (the refused one never)", len(tc.items), len(calls), served)
		}
		mu.Unlock()
	}
}
