package goals_test

// The "shardkit" lease backend needs a running cluster: the tests run a
// one-instance cluster inside the test process (internal/server, the code
// behind `shardkit run`, without its supervisor). Only this test file
// imports internal/server; goals-server reaches the cluster through the
// public api/cluster/v1 like any client.

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/server"
)

// startCluster runs a one-instance cluster until the test ends and returns
// its gRPC address once it grants leases.
func startCluster(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		entry := ""
		for { // the supervisor's part: start afresh when the worker asks
			err := server.RunInstance(ctx, server.InstanceConfig{
				Listen: addr, DataDir: tb.TempDir(), AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
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
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				tb.Logf("cluster instance stopped: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("cluster instance did not stop")
		}
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	c := clusterv1.NewClusterServiceClient(conn)
	poll(tb, "the cluster to grant leases", func() bool {
		select {
		case err := <-done:
			done <- err
			tb.Fatalf("cluster instance ended: %v", err)
		default:
		}
		rctx, rcancel := context.WithTimeout(tb.Context(), time.Second)
		defer rcancel()
		_, err := c.AcquireLease(rctx, &clusterv1.AcquireLeaseRequest{Name: "test/ready", Holder: "probe", TtlMs: 1})
		return err == nil
	})
	return addr
}
