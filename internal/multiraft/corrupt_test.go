package multiraft_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/multiraft"
)

// A follower whose disk lost entries it had acknowledged (its write-ahead
// log truncated behind its back) hears from the leader of a commit index
// beyond its log; raft panics there. The host stops with ErrCorruptState
// (reported through OnFatal) instead of the panic killing the process, so
// its owner can refuse to go on rather than crash and restart forever.
func TestLostLogEntriesStopTheHostAsCorrupt(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 21, 3, nil)
	c.addGroup(g1, 1, 2, 3)
	c.start()
	w := &writer{c: c}
	w.write(t, 5)
	victim := c.leader(g1)%3 + 1
	c.waitConverged(g1, victim)

	// What the victim's disk will hold: what it has synced by now.
	earlier := func() *vfs.MemFS {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.nodes[victim].fs.CrashClone(vfs.CrashCloneCfg{})
	}()
	// It acknowledges more entries, then loses them.
	w.write(t, 20)
	c.waitConverged(g1, victim)
	c.crash(victim)
	c.mu.Lock()
	c.nodes[victim].fs = earlier
	c.mu.Unlock()
	c.restart(victim)

	n := c.nodes[victim]
	waitFor(t, 30*time.Second, "the victim's host to stop", func() bool { return n.fatal.Load() != nil })
	err := *n.fatal.Load()
	if !errors.Is(err, multiraft.ErrCorruptState) || !multiraft.IsCorrupt(err) {
		t.Fatalf("host stopped with %v; want ErrCorruptState", err)
	}
	if !strings.Contains(err.Error(), "group 1") || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("host stopped with %q; want raft's account naming the group", err)
	}
	t.Logf("the host stopped: %v", err)
	// The others go on.
	w.write(t, 5)
}
