//go:build failpoints

package multiraft_test

import (
	"errors"
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
