package forward_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/forward"
)

// node serves GetLease with its own name as the holder; its route sends
// GetLease to *to (empty: serve here).
type node struct {
	clusterv1.UnimplementedClusterServiceServer
	name   string
	addr   string
	to     atomic.Pointer[string]
	served atomic.Int64
	fwd    *forward.Forwarder
	seen   atomic.Pointer[metadata.MD]
}

func (n *node) GetLease(ctx context.Context, _ *clusterv1.GetLeaseRequest) (*clusterv1.GetLeaseResponse, error) {
	n.served.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	n.seen.Store(&md)
	return &clusterv1.GetLeaseResponse{Lease: &clusterv1.Lease{Holder: n.name}}, nil
}

func start(t *testing.T, name string) *node {
	t.Helper()
	n := &node{name: name}
	empty := ""
	n.to.Store(&empty)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.addr = lis.Addr().String()
	route := func(_ context.Context, method string, _ any) (forward.Decision, error) {
		if method != clusterv1.ClusterService_GetLease_FullMethodName {
			return forward.Decision{}, nil
		}
		to := *n.to.Load()
		hint := to
		if hint == "" {
			hint = n.addr
		}
		return forward.Decision{Addr: to, Hint: hint, HintKey: "x-test-leader", Why: "the test's leader"}, nil
	}
	n.fwd = forward.New(route, func(addr string) (grpc.ClientConnInterface, error) {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err == nil {
			t.Cleanup(func() { c.Close() })
		}
		return c, err
	})
	s := grpc.NewServer(grpc.UnaryInterceptor(n.fwd.Interceptor()))
	clusterv1.RegisterClusterServiceServer(s, n)
	go s.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(s.Stop)
	return n
}

func call(t *testing.T, addr string, md metadata.MD) (*clusterv1.GetLeaseResponse, metadata.MD, error) {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := metadata.NewOutgoingContext(t.Context(), md)
	var hdr metadata.MD
	resp, err := clusterv1.NewClusterServiceClient(c).GetLease(ctx, &clusterv1.GetLeaseRequest{Name: "x"}, grpc.Header(&hdr))
	return resp, hdr, err
}

func TestForwardsOneHopAndNamesTheServer(t *testing.T) {
	t.Parallel()
	a, b := start(t, "a"), start(t, "b")
	a.to.Store(&b.addr)
	resp, hdr, err := call(t, a.addr, metadata.Pairs("x-user-header", "kept"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetLease().GetHolder() != "b" || a.served.Load() != 0 || b.served.Load() != 1 {
		t.Fatalf("answer from %q; a served %d, b served %d: want b's answer, served by b alone", resp.GetLease().GetHolder(), a.served.Load(), b.served.Load())
	}
	if got := hdr.Get("x-test-leader"); len(got) != 1 || got[0] != b.addr {
		t.Fatalf("hint header %v, want %s", got, b.addr)
	}
	seen := *b.seen.Load()
	if len(seen.Get("x-user-header")) != 1 || len(seen.Get(forward.MarkerHeader)) != 1 {
		t.Fatalf("b saw headers %v: want the caller's header and the forwarded marker", seen)
	}
}

func TestAForwardedCallIsNotForwardedAgain(t *testing.T) {
	t.Parallel()
	a, b := start(t, "a"), start(t, "b")
	// a and b each believe the other serves: an election in progress.
	a.to.Store(&b.addr)
	b.to.Store(&a.addr)
	_, _, err := call(t, a.addr, nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "already forwarded once; retry") {
		t.Fatalf("error %v: want Unavailable, already forwarded once", err)
	}
	if a.served.Load()+b.served.Load() != 0 {
		t.Fatal("the call was served although nobody was the leader")
	}
}

func TestCallServesLocallyOrForwards(t *testing.T) {
	t.Parallel()
	a, b := start(t, "a"), start(t, "b")
	local := func(context.Context) (any, error) {
		return &clusterv1.GetLeaseResponse{Lease: &clusterv1.Lease{Holder: "local"}}, nil
	}
	req := &clusterv1.GetLeaseRequest{Name: "x"}
	got, err := a.fwd.Call(t.Context(), clusterv1.ClusterService_GetLease_FullMethodName, req, local)
	if err != nil || got.(*clusterv1.GetLeaseResponse).GetLease().GetHolder() != "local" {
		t.Fatalf("Call served here = %v, %v", got, err)
	}
	a.to.Store(&b.addr)
	got, err = a.fwd.Call(t.Context(), clusterv1.ClusterService_GetLease_FullMethodName, req, local)
	if err != nil || got.(*clusterv1.GetLeaseResponse).GetLease().GetHolder() != "b" {
		t.Fatalf("Call forwarded = %v, %v: want b's answer", got, err)
	}
}
