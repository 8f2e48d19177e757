package clusterstore_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/storetest"
)

// testCluster starts one in-process instance and a client of it.
func testCluster(t *testing.T) *client.Client {
	t.Helper()
	addr := servertest.OneInstanceCluster(t)
	c, err := client.New(t.Context(), client.Config{Peers: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixes atomic.Int64

// factory gives every call spaces of its own (a new prefix) on c's
// cluster, so that tests run in parallel on one cluster.
func factory(c *client.Client) storetest.Factory {
	return func(t *testing.T, shards int) storetest.Opener {
		t.Helper()
		prefix := fmt.Sprintf("t%d", prefixes.Add(1))
		first, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: prefix, Shards: shards})
		if err != nil {
			t.Fatalf("Open(%s): %v", prefix, err)
		}
		_ = first.Close()
		return func(t *testing.T) scheduler.Store {
			t.Helper()
			s, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: prefix})
			if err != nil {
				t.Fatalf("Open(%s): %v", prefix, err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
}

func TestConformance(t *testing.T) {
	storetest.Run(t, factory(testCluster(t)))
}

func TestRunner(t *testing.T) {
	storetest.RunRunner(t, factory(testCluster(t)))
}

// TestOpenChecksItsArguments: the number of shards is fixed when the
// store is made, and bad prefixes are refused.
func TestOpenChecksItsArguments(t *testing.T) {
	c := testCluster(t)
	if _, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: "fresh"}); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("Open of a new store without shards = %v, want ErrInvalid", err)
	}
	s, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: "fixed", Shards: 8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Shards() != 8 {
		t.Fatalf("Shards() = %d, want 8", s.Shards())
	}
	if _, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: "fixed", Shards: 4}); !errors.Is(err, scheduler.ErrInvalid) {
		t.Fatalf("Open with another shard count = %v, want ErrInvalid", err)
	}
	if s, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: "fixed"}); err != nil || s.Shards() != 8 {
		t.Fatalf("Open of the existing store = %v, want its 8 shards", err)
	}
	for _, p := range []string{"Bad", "9x", "a-b", "abcdefghijklmnopqrstuvwxyz0123456"} {
		if _, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: p, Shards: 1}); !errors.Is(err, scheduler.ErrInvalid) {
			t.Errorf("Open with prefix %q = %v, want ErrInvalid", p, err)
		}
	}
}
