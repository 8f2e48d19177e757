package coordinator_test

// The shardkit backend runs the conformance suite against a real
// one-instance cluster started in this test process (internal/server, the
// code behind `shardkit run`, without its supervisor). Only this test file
// imports internal/server; the backend speaks only api/cluster/v1.

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
	"github.com/shardkit/shardkit/numerator/coordinator"
	"github.com/shardkit/shardkit/numerator/coordinator/coordtest"
)

func startCluster(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		entry := ""
		for {
			err := server.RunInstance(ctx, server.InstanceConfig{Listen: addr, DataDir: dir, ShutdownTimeout: 2 * time.Second}, entry)
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
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.AcquireLease(rctx, &clusterv1.AcquireLeaseRequest{Name: "test/ready", Holder: "probe", TtlMs: 1})
		rcancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster grants no lease: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestShardkitConformance(t *testing.T) {
	addr := startCluster(t)
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
		Timeout: 800 * time.Millisecond,
	})
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
