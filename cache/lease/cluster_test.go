package lease_test

// The cluster backend runs the conformance suite against a real one-instance
// shardkit cluster, started in this test process (internal/server, the code
// behind `shardkit run`, without its supervisor process). Only this test
// file imports internal/server/servertest; the store itself speaks only the public
// api/cluster/v1.

import (
	"errors"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/cache/lease/leasetest"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

func TestClusterConformance(t *testing.T) {
	t.Parallel()
	addr := servertest.OneInstanceCluster(t)
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
