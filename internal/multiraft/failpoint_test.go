//go:build failpoints

package multiraft_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/multiraft"
)

var errKilled = errors.New("killed at failpoint")

// killAt arms a failpoint that kills the host the after-th time it fires.
func killAt(n *testNode, name string, after int64) {
	var hits atomic.Int64
	n.fp.Set(name, func() error {
		if hits.Add(1) == after {
			return errKilled
		}
		return nil
	})
}

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

func TestFailpointsLoseNoAcknowledgedWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fp       string
		onLeader bool
	}{
		{"leader killed before save", multiraft.FailpointBeforeSave, true},
		{"leader killed after save", multiraft.FailpointAfterSave, true},
		{"leader killed before send", multiraft.FailpointBeforeSend, true},
		{"follower killed before save", multiraft.FailpointBeforeSave, false},
		{"follower killed after save", multiraft.FailpointAfterSave, false},
		{"follower killed before send", multiraft.FailpointBeforeSend, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 11, 3, nil)
			c.addGroup(g1, 1, 2, 3)
			c.start()
			w := &writer{c: c}
			w.write(t, 10)
			victim := c.leader(g1)
			if !tc.onLeader {
				victim = victim%3 + 1
			}
			n := c.nodes[victim]
			killAt(n, tc.fp, 3)
			w.write(t, 10)
			waitFor(t, 20*time.Second, "the failpoint to kill the host", func() bool { return n.fatal.Load() != nil })
			if err := *n.fatal.Load(); !errors.Is(err, errKilled) {
				t.Fatalf("host stopped with %v, want the failpoint's error", err)
			}
			c.crash(victim)
			n.fp.Set(tc.fp, nil)
			w.write(t, 5)
			c.restart(victim)
			w.write(t, 5)
			w.checkLog(t, 1, 2, 3)
		})
	}
}

func TestKilledBeforeApplyingSnapshotRecovers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 12, 3, func(cfg *multiraft.Config) {
		cfg.LogCompactionThreshold = 30
		cfg.LogCompactionKeep = 3
	})
	c.addGroup(g1, 1, 2, 3)
	c.start()
	w := &writer{c: c}
	w.write(t, 5)
	down := c.leader(g1)%3 + 1
	c.crash(down)
	w.write(t, 80) // the log is compacted past the down member
	n := c.nodes[down]
	killAt(n, multiraft.FailpointBeforeApplySnapshot, 1)
	c.restart(down)
	waitFor(t, 20*time.Second, "the member to die before restoring", func() bool { return n.fatal.Load() != nil })
	c.crash(down)
	n.fp.Set(multiraft.FailpointBeforeApplySnapshot, nil)
	c.restart(down) // finds the restore marker and restores before it runs
	if got := c.group(down, g1).Status().SnapshotsRestored; got != 1 {
		t.Fatalf("restart restored %d snapshots, want the interrupted one", got)
	}
	w.write(t, 5)
	w.checkLog(t, 1, 2, 3)
}
