package lease_test

// The cluster backend runs the conformance suite against a real one-instance
// shardkit cluster, started in this test process (internal/server, the code
// behind `shardkit run`, without its supervisor process). Only this test
// file imports internal/server; the store itself speaks only the public
// api/cluster/v1.

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/cache/lease/leasetest"
	"github.com/shardkit/shardkit/internal/server"
)

// startCluster runs a one-instance cluster until the test ends and returns
// its gRPC address once it grants leases.
func startCluster(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// The supervisor's part: a worker may ask to start afresh from an
		// entrypoint (after discovery it boots) with an empty data dir.
		entry := ""
		for {
			err := server.RunInstance(ctx, server.InstanceConfig{
				Listen: addr, DataDir: t.TempDir(), AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
			}, entry)
			var rb *server.RebootstrapError
			if errors.As(err, &rb) && ctx.Err() == nil {
				entry = rb.Entrypoint
				continue
			}
			done <- err
			return
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("cluster instance stopped: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("cluster instance did not stop")
		}
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := clusterv1.NewClusterServiceClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		rctx, rcancel := context.WithTimeout(t.Context(), time.Second)
		_, err := c.AcquireLease(rctx, &clusterv1.AcquireLeaseRequest{Name: "test/ready", Holder: "probe", TtlMs: 1})
		rcancel()
		if err == nil {
			return addr
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("cluster instance ended: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster at %s grants no lease after 60s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestClusterConformance(t *testing.T) {
	t.Parallel()
	addr := startCluster(t)
	leasetest.Run(t, func(t *testing.T) lease.Store {
		t.Helper()
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		s, err := lease.NewClusterStore(conn, lease.ClusterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestClusterStoreRejectsBadNamespace(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"a/b", "with space", string(make([]byte, 129))} {
		if _, err := lease.NewClusterStore(nil, lease.ClusterOptions{Namespace: ns}); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("namespace %q: %v, want ErrInvalid", ns, err)
		}
	}
}
