package robustness

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The minimal reproductions of what TestRobustness finds about the
// client's error contract, against a fake instance that applies a write
// and then fails the way a real cluster does under faults. The client
// documents ErrUnavailable as "nothing was done; a retry is safe", so a
// write that was applied must never end with it: its outcome is unknown
// (ErrOutcomeUnknown). A caller that trusts ErrUnavailable and writes
// again (a new call, a new request id) applies the write twice.

// fakeInstance serves DataService for one replicaset "r1" that it leads,
// with the robustness space; write decides how each Write ends.
type fakeInstance struct {
	datav1.UnimplementedDataServiceServer
	addr  string
	srv   *grpc.Server
	write func(ctx context.Context, n int, req *datav1.WriteRequest) (*datav1.WriteResponse, error)

	mu      sync.Mutex
	writes  int
	applied [][]byte // request ids applied
}

func startFake(t *testing.T, write func(ctx context.Context, f *fakeInstance, n int, req *datav1.WriteRequest) (*datav1.WriteResponse, error)) *fakeInstance {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeInstance{addr: l.Addr().String(), srv: grpc.NewServer()}
	f.write = func(ctx context.Context, n int, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
		return write(ctx, f, n, req)
	}
	datav1.RegisterDataServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(l) }()
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeInstance) apply(req *datav1.WriteRequest) *datav1.WriteResponse {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, req.GetRequestId())
	return &datav1.WriteResponse{Index: 7, Results: []*datav1.OpResult{{Tuple: req.GetOps()[0].GetTuple(), Version: 7}}}
}

func (f *fakeInstance) appliedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applied)
}

func (f *fakeInstance) GetRouting(context.Context, *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	return &datav1.GetRoutingResponse{
		BucketCount: 30,
		Buckets:     []*datav1.BucketRange{{First: 1, Last: 30, ReplicasetId: "r1"}},
		Replicasets: []*datav1.ReplicasetRoute{{ReplicasetId: "r1", LeaderAddress: f.addr, Weight: 1,
			Members: []*datav1.Member{{InstanceId: "i1", Address: f.addr}}}},
		Spaces: []*datav1.Space{{Name: spaceName, Id: 1, PrimaryKey: []uint32{1}, ShardingKey: []uint32{1}, SchemaVersion: 1,
			Format: []*datav1.Field{{Name: "key", Type: tuple.TypeUnsigned.String()}, {Name: "value", Type: tuple.TypeString.String()}}}},
		SchemaVersion: 1,
	}, nil
}

func (f *fakeInstance) Write(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	f.mu.Lock()
	f.writes++
	n := f.writes
	f.mu.Unlock()
	return f.write(ctx, n, req)
}

// noLeader is a real replicaset member's answer during an election.
func noLeader() error {
	st, _ := status.New(codes.Unavailable, "this instance is not the leader of replicaset r1; it knows no leader now (an election?); retry").
		WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_NOT_LEADER, ReplicasetId: "r1"})
	return st.Err()
}

func TestClientErrorContract(t *testing.T) {
	cases := []struct {
		name string
		// timeout is the client's per-attempt timeout; deadline the call's.
		timeout, deadline time.Duration
		write             func(ctx context.Context, f *fakeInstance, n int, req *datav1.WriteRequest) (*datav1.WriteResponse, error)
	}{
		{
			// The leader applies the write and dies before it answers:
			// the connection breaks (gRPC: Unavailable), later attempts
			// find no instance (Unavailable). The robustness test sees
			// this on every kill of the replicaset's leader.
			name: "leader dies after applying", timeout: 2 * time.Second, deadline: 30 * time.Second,
			write: func(ctx context.Context, f *fakeInstance, _ int, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
				f.apply(req)
				go f.srv.Stop() // the process dies: every connection breaks
				<-ctx.Done()
				return nil, ctx.Err()
			},
		},
		{
			// The first attempt is applied but its answer is late (the
			// attempt times out); the next attempts meet an election
			// (Unavailable with a redirect that names no leader) until
			// the client gives up.
			name: "attempt timed out, then an election", timeout: 300 * time.Millisecond, deadline: 30 * time.Second,
			write: func(ctx context.Context, f *fakeInstance, n int, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
				if n == 1 {
					f.apply(req)
					<-ctx.Done()
					return nil, status.Error(codes.DeadlineExceeded, "the write's outcome is unknown")
				}
				return nil, noLeader()
			},
		},
		{
			// As above, but the call's deadline ends during the client's
			// backoff between two attempts.
			name: "deadline during the backoff", timeout: 300 * time.Millisecond, deadline: 700 * time.Millisecond,
			write: func(ctx context.Context, f *fakeInstance, n int, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
				if n == 1 {
					f.apply(req)
					<-ctx.Done()
					return nil, status.Error(codes.DeadlineExceeded, "the write's outcome is unknown")
				}
				return nil, noLeader()
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.write)
			c, err := client.New(context.Background(), client.Config{Peers: []string{f.addr}, Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			_, err = c.Space(spaceName).Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("v")})
			if f.appliedCount() != 1 {
				t.Fatalf("the fake applied the write %d times, want once (err %v)", f.appliedCount(), err)
			}
			switch {
			case err == nil:
				// An answer from a retry that found the write applied is
				// fine too (a real replicaset remembers request ids).
			case errors.Is(err, client.ErrUnavailable):
				t.Errorf("the write was applied, but the client says ErrUnavailable (\"nothing was done; a retry is safe\"): %v", err)
			case !errors.Is(err, client.ErrOutcomeUnknown):
				t.Errorf("the write was applied and its answer lost: want ErrOutcomeUnknown, got %v", err)
			}
		})
	}
}
