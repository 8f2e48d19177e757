package lease_test

// The cluster backend runs the conformance suite against a real one-instance
// shardkit cluster, started in this test process (internal/server, the code
// behind `shardkit run`, without its supervisor process). Only this test
// file imports internal/server/servertest; the store itself speaks only through the
// public client package.

import (
	"errors"
	"testing"

	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/cache/lease/leasetest"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

func TestClusterConformance(t *testing.T) {
	t.Parallel()
	addr := servertest.OneInstanceCluster(t)
	leasetest.Run(t, func(t *testing.T) lease.Store {
		t.Helper()
		c, err := client.New(t.Context(), client.Config{Peers: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s, err := lease.NewClusterStore(c, lease.ClusterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestClusterStoreRejectsBadNamespace(t *testing.T) {
	t.Parallel()
	for _, ns := range []string{"a/b", "with space", string(make([]byte, 129))} {
		c, err := client.New(t.Context(), client.Config{Peers: []string{"127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lease.NewClusterStore(c, lease.ClusterOptions{Namespace: ns}); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("namespace %q: %v, want ErrInvalid", ns, err)
		}
	}
}
