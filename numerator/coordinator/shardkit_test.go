package coordinator_test

// The shardkit backend runs the conformance suite against a real
// one-instance cluster started in this test process (internal/server, the
// code behind `shardkit run`, without its supervisor). Only this test file
// imports internal/server/servertest; the backend speaks only api/cluster/v1.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/coordinator/coordtest"
)

func TestShardkitConformance(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	coordtest.Run(t, coordtest.Harness{
		New: func(t *testing.T, record string) coordinator.Coordinator {
			t.Helper()
			c, err := coordinator.NewShardkit(addr + "/test/" + recordKey(record))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		// Expiry is judged by the cluster leader's clock: time must pass.
		Advance: func(t *testing.T, d time.Duration) {
			t.Helper()
			time.Sleep(d)
		},
		// Long enough that an RPC under -race on a loaded machine never
		// outlives a lock the suite expects to hold (renew leaves Timeout/3).
		Timeout: 3 * time.Second,
	})
}

// A release applied by the cluster whose answer was lost (DeadlineExceeded)
// has an unknown outcome; the lease shows it applied (retried, it would be
// refused: the lock is already released). Report must still succeed, since
// the state was recorded.
func TestShardkitReportAppliedButUnanswered(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	var dropped atomic.Int32
	dropFirstRelease := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && strings.HasSuffix(method, "/ReleaseLease") && dropped.Add(1) == 1 {
			return status.Error(codes.DeadlineExceeded, "injected: the answer was lost")
		}
		return err
	}
	cl, err := client.New(t.Context(), client.Config{Peers: []string{addr}, DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(dropFirstRelease)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	c := coordinator.NewShardkitClient(cl, "test/applied-unanswered")
	ctx := t.Context()

	l, err := c.Acquire(ctx, "dc-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Report(ctx, l.Ticket, coordinator.Report{OK: true, Location: "/states/1", Version: "1.0.0.0"})
	if err != nil {
		t.Fatalf("Report after an applied but unanswered release: %v", err)
	}
	if dropped.Load() != 1 {
		t.Fatalf("%d releases went through the lossy connection, want 1", dropped.Load())
	}
	if st.Location != "/states/1" || st.Ticket != l.Ticket {
		t.Fatalf("Report = %+v", st)
	}
	got, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Lock != nil || got.State.Location != "/states/1" || got.State.Ticket != l.Ticket {
		t.Fatalf("status %+v after the report", got)
	}
	// Refusals that are real (a timed-out holder, with or without a
	// successor) are the conformance suite's TimedOut* tests.
}

func TestParseShardkitAddr(t *testing.T) {
	for _, tc := range []struct {
		in    string
		hosts int
		name  string
		bad   bool
	}{
		{in: "127.0.0.1:3301", hosts: 1, name: coordinator.DefaultShardkitLease},
		{in: "a:1,b:2/idx/main", hosts: 2, name: "idx/main"},
		{in: "", bad: true},
		{in: "a:1/", bad: true},
		{in: "/only-a-name", bad: true},
	} {
		hosts, name, err := coordinator.ParseShardkitAddr(tc.in)
		if tc.bad != (err != nil) {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		if !tc.bad && (len(hosts) != tc.hosts || name != tc.name) {
			t.Errorf("%q: %v %q", tc.in, hosts, name)
		}
	}
}
