package multiraft_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// Shared by the fault tests that need no failpoints (fulldisk_test.go) and
// those that do (failpoint_test.go, built with -tags failpoints).

// writer appends numbered items to one key and remembers which appends were
// acknowledged; checkLog verifies that every acknowledged append is in the
// final value exactly once and in order.
type writer struct {
	c     *cluster
	acked []string
}

func (w *writer) write(t *testing.T, n int) {
	t.Helper()
	for range n {
		item := fmt.Sprintf("%d,", len(w.acked))
		for {
			lead := w.c.currentLeader(g1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := w.c.propose(ctx, lead, g1, appendCmd("log", item))
			cancel()
			if err == nil {
				w.acked = append(w.acked, item)
				break
			}
			// Not acknowledged: it may or may not be applied. Use a new item
			// so that the check below can tell them apart.
			item = "x" + item
		}
	}
}

func (w *writer) checkLog(t *testing.T, nodes ...multiraft.NodeID) {
	t.Helper()
	w.c.waitConverged(g1, nodes...)
	for _, id := range nodes {
		v, _ := w.c.read(id, g1, "log")
		items := strings.SplitAfter(v, ",")
		next := 0
		seen := map[string]bool{}
		for _, it := range items {
			if it == "" {
				continue
			}
			if seen[it] {
				t.Fatalf("node %d: %q applied twice in %q", id, it, v)
			}
			seen[it] = true
			if next < len(w.acked) && it == w.acked[next] {
				next++
			}
		}
		if next != len(w.acked) {
			t.Fatalf("node %d lost acknowledged append %q: log is %q", id, w.acked[next], v)
		}
	}
}
