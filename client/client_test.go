package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/client"
)

// fake is a scripted ClusterService: each call runs its hook, and counts.
type fake struct {
	clusterv1.UnimplementedClusterServiceServer
	addr string

	status  func(context.Context) (*clusterv1.GetStatusResponse, error)
	release func(context.Context, *clusterv1.ReleaseLeaseRequest) (*clusterv1.ReleaseLeaseResponse, error)
	get     func(context.Context, *clusterv1.GetLeaseRequest) (*clusterv1.GetLeaseResponse, error)

	calls atomic.Int64
}

func (f *fake) GetStatus(ctx context.Context, _ *clusterv1.GetStatusRequest) (*clusterv1.GetStatusResponse, error) {
	f.calls.Add(1)
	return f.status(ctx)
}

func (f *fake) ReleaseLease(ctx context.Context, r *clusterv1.ReleaseLeaseRequest) (*clusterv1.ReleaseLeaseResponse, error) {
	f.calls.Add(1)
	return f.release(ctx, r)
}

func (f *fake) GetLease(ctx context.Context, r *clusterv1.GetLeaseRequest) (*clusterv1.GetLeaseResponse, error) {
	f.calls.Add(1)
	return f.get(ctx, r)
}

func serve(t *testing.T, f *fake) *fake {
	t.Helper()
	f.addr = serveGRPC(t, func(s *grpc.Server) { clusterv1.RegisterClusterServiceServer(s, f) })
	return f
}

// serveGRPC starts a gRPC server with what register puts on it, on a
// loopback port, stopped when the test ends; it returns the address.
func serveGRPC(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(lis) //nolint:errcheck // ends with Stop
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// deadAddr is an address nobody listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func newClient(t *testing.T, timeout time.Duration, peers ...string) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), client.Config{Peers: peers, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func okStatus(id string) func(context.Context) (*clusterv1.GetStatusResponse, error) {
	return func(context.Context) (*clusterv1.GetStatusResponse, error) {
		return &clusterv1.GetStatusResponse{ClusterId: id}, nil
	}
}

func TestAddressesAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want string // "" = valid
	}{
		{"127.0.0.1:3301", ""},
		{"a:1,b:2", ""},
		{"a:1, a:1", ""},
		{"localhost", "want host:port"},
		{":3301", "has no host"},
		{"a:0", "port"},
		{"a:99999", "port"},
		{"a:01", "port"},
		{"a b:1", "not allowed in a host"},
		{"a:1,,b:2", "empty address"},
		{"", "empty address"},
	} {
		peers, err := client.ParsePeers(tc.in)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.in, err)
			}
			if tc.in == "a:1, a:1" && len(peers) != 1 {
				t.Errorf("%q: duplicates kept: %v", tc.in, peers)
			}
			continue
		}
		if err == nil || !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want ErrInvalid naming %q", tc.in, err, tc.want)
		}
	}
	if _, err := client.New(t.Context(), client.Config{}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("New without peers: %v, want ErrInvalid", err)
	}
}

func TestFailsOverToTheNextInstance(t *testing.T) {
	t.Parallel()
	live := serve(t, &fake{status: okStatus("c1")})
	dead := deadAddr(t)
	c := newClient(t, 5*time.Second, dead, live.addr)
	st, err := c.Status(t.Context(), false)
	if err != nil {
		t.Fatalf("Status with a dead first peer: %v", err)
	}
	if st.GetClusterId() != "c1" {
		t.Fatalf("status %v", st)
	}
	// The instance that answered is asked first from now on.
	if _, err := c.Status(t.Context(), false); err != nil || live.calls.Load() != 2 {
		t.Fatalf("second Status: %v, live instance saw %d calls", err, live.calls.Load())
	}
}

func TestNoInstanceAnswersIsUnavailableAndRetryable(t *testing.T) {
	t.Parallel()
	a, b := deadAddr(t), deadAddr(t)
	c := newClient(t, 5*time.Second, a, b)
	_, err := c.Status(t.Context(), false)
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrUnavailable) || !client.IsRetryable(err) {
		t.Fatalf("error %v: want a retryable *client.Error wrapping ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "tried "+a+", "+b) || status.Code(err) != codes.Unavailable {
		t.Fatalf("error %q (code %v): want both peers named and code Unavailable", err, status.Code(err))
	}
}

func TestRefusalIsNotRetriedAndKeepsTheClusterMessage(t *testing.T) {
	t.Parallel()
	refusing := serve(t, &fake{status: func(context.Context) (*clusterv1.GetStatusResponse, error) {
		return nil, status.Error(codes.FailedPrecondition, "cannot expel \"i1\": it is the last instance")
	}})
	other := serve(t, &fake{status: okStatus("c1")})
	c := newClient(t, 5*time.Second, refusing.addr, other.addr)
	_, err := c.Status(t.Context(), false)
	if !errors.Is(err, client.ErrRefused) || client.IsRetryable(err) {
		t.Fatalf("error %v: want ErrRefused, not retryable", err)
	}
	if !strings.Contains(err.Error(), "peer "+refusing.addr+": cannot expel") {
		t.Fatalf("error %q: want the peer and the cluster's message", err)
	}
	if other.calls.Load() != 0 {
		t.Fatal("a refusal was retried on another instance")
	}
}

func TestAnAttemptThatTimesOutMovesOnForIdempotentCalls(t *testing.T) {
	t.Parallel()
	hang := serve(t, &fake{status: func(ctx context.Context) (*clusterv1.GetStatusResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	live := serve(t, &fake{status: okStatus("c1")})
	c := newClient(t, 300*time.Millisecond, hang.addr, live.addr)
	if _, err := c.Status(t.Context(), false); err != nil {
		t.Fatalf("Status (idempotent) after a hung instance: %v", err)
	}
}

// The time instances that refused at once did not use goes to the ones
// after them: the last of four peers, slower than Config.Timeout, answers
// within the call's deadline. It was given Config.Timeout alone, and the
// call failed with most of its deadline left.
func TestTimeUnusedByRefusingInstancesGoesToTheNext(t *testing.T) {
	t.Parallel()
	slow := serve(t, &fake{status: func(ctx context.Context) (*clusterv1.GetStatusResponse, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		return &clusterv1.GetStatusResponse{ClusterId: "c1"}, nil
	}})
	c := newClient(t, 200*time.Millisecond, deadAddr(t), deadAddr(t), deadAddr(t), slow.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := c.Status(ctx, false)
	if err != nil || st.GetClusterId() != "c1" {
		t.Fatalf("Status with three dead peers and a slow one: %v, %v", st, err)
	}
}

func TestLeaderHintIsAskedFirst(t *testing.T) {
	t.Parallel()
	leader := serve(t, &fake{status: okStatus("from-leader")})
	follower := serve(t, &fake{status: func(ctx context.Context) (*clusterv1.GetStatusResponse, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs(client.LeaderHeader, leader.addr))
		return &clusterv1.GetStatusResponse{ClusterId: "from-follower"}, nil
	}})
	c := newClient(t, 5*time.Second, follower.addr)
	if st, err := c.Status(t.Context(), false); err != nil || st.GetClusterId() != "from-follower" {
		t.Fatalf("first Status: %v %v", st, err)
	}
	st, err := c.Status(t.Context(), false)
	if err != nil || st.GetClusterId() != "from-leader" {
		t.Fatalf("second Status went to %q (%v), want the leader the first answer named", st.GetClusterId(), err)
	}
}

func TestReleaseWhoseAnswerWasLostIsCheckedAgainstTheLease(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	lease := &clusterv1.Lease{Name: "l", Holder: "h", Ticket: 7}
	f := serve(t, &fake{
		release: func(context.Context, *clusterv1.ReleaseLeaseRequest) (*clusterv1.ReleaseLeaseResponse, error) {
			mu.Lock()
			lease = &clusterv1.Lease{Name: "l", Ticket: 7, Value: []byte("v")}
			mu.Unlock()
			return nil, status.Error(codes.DeadlineExceeded, "injected: the answer was lost")
		},
		get: func(context.Context, *clusterv1.GetLeaseRequest) (*clusterv1.GetLeaseResponse, error) {
			mu.Lock()
			defer mu.Unlock()
			return &clusterv1.GetLeaseResponse{Lease: lease}, nil
		},
	})
	c := newClient(t, 5*time.Second, f.addr)
	ok, err := c.Leases().ReleaseWithValue(t.Context(), "l", "h", 7, []byte("v"))
	if err != nil || !ok {
		t.Fatalf("ReleaseWithValue = %v, %v: want released (the lease shows it applied)", ok, err)
	}
	// Another value than the lease holds: not ours, the error stands.
	ok, err = c.Leases().ReleaseWithValue(t.Context(), "l", "h", 7, []byte("other"))
	if ok || !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("ReleaseWithValue of another value = %v, %v: want ErrOutcomeUnknown", ok, err)
	}
}

func TestCallsAfterCloseFail(t *testing.T) {
	t.Parallel()
	f := serve(t, &fake{status: okStatus("c1")})
	c, err := client.New(t.Context(), client.Config{Peers: []string{f.addr}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Status(t.Context(), false); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Status after Close: %v, want ErrUnavailable", err)
	}
}
