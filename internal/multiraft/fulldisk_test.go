package multiraft_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// fullDisk makes every write to a node's files fail with ENOSPC while on:
// creating, writing, syncing, renaming. Reads, removals and closes still
// work, as on a real full disk.
func fullDisk(on func() bool) errorfs.Injector {
	return errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !on() || op.Kind.ReadOrWrite() != errorfs.OpIsWrite {
			return nil
		}
		switch op.Kind {
		case errorfs.OpRemove, errorfs.OpRemoveAll, errorfs.OpFileClose, errorfs.OpLock:
			return nil
		}
		return syscall.ENOSPC
	})
}

// A member whose disk fills up stops (its host reports a storage failure
// naming ENOSPC, the process does not panic), acknowledges nothing it could
// not persist, and after space is freed and it restarts, catches up: no
// acknowledged write is lost, none is applied twice.
func TestFullDiskLosesNoAcknowledgedWrite(t *testing.T) {
	t.Parallel()
	for _, onLeader := range []bool{true, false} {
		name := "follower"
		if onLeader {
			name = "leader"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, 13, 3, nil)
			c.addGroup(g1, 1, 2, 3)
			c.start()
			w := &writer{c: c}
			w.write(t, 10)
			victim := c.leader(g1)
			if !onLeader {
				victim = victim%3 + 1
			}
			n := c.nodes[victim]
			n.diskFull.Store(true)
			// Writes go on; the victim fails on its first persist.
			w.write(t, 10)
			waitFor(t, 20*time.Second, "the full disk to stop the host", func() bool { return n.fatal.Load() != nil })
			err := *n.fatal.Load()
			if !errors.Is(err, multiraft.ErrStorage) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("host stopped with %v, want a storage failure wrapping ENOSPC", err)
			}
			t.Logf("the host stopped: %v", err)
			c.crash(victim)
			w.write(t, 5)
			n.diskFull.Store(false) // space freed
			c.restart(victim)
			w.write(t, 5)
			w.checkLog(t, 1, 2, 3)
		})
	}
}
