package multiraft_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
	"github.com/shardkit/shardkit/internal/multiraft/memnet"
	"github.com/shardkit/shardkit/internal/storage"
)

// testNode is one process of a test cluster: a crashable in-memory file
// system, its Pebble database and a host in manual mode.
type testNode struct {
	id          multiraft.NodeID
	fs          *vfs.MemFS
	db          *pebble.DB
	host        *multiraft.Host
	fp          *multiraft.Failpoints
	groups      map[multiraft.GroupID]*multiraft.Group
	sms         map[multiraft.GroupID]*kvsm.SM
	memberArg   map[multiraft.GroupID][]multiraft.NodeID // what OpenGroup was given
	alive       bool
	incarnation int
	fatal       atomic.Pointer[error] // set when the host stopped on a storage failure (or failpoint)
	diskFull    atomic.Bool           // every write to fs fails with ENOSPC (fulldisk_test.go)
	// leaseReads counts the reads its groups served under a lease in the
	// incarnations before this one (see cluster.leaseReads).
	leaseReads uint64
}

// leaseReads counts the reads every group served under a lease on every
// node, over all their incarnations.
func (c *cluster) leaseReads() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, node := range c.nodes {
		n += node.leaseReads
		for _, g := range node.groups {
			if node.alive {
				n += g.Status().LeaseReads
			}
		}
	}
	return n
}

// cluster drives the hosts of a test in lock step with the network: one
// step delivers due messages and lets every live host process its work;
// every ticksEvery steps every host ticks.
type cluster struct {
	t          testing.TB
	net        *memnet.Network
	tweak      func(*multiraft.Config)
	ticksEvery uint64

	mu      sync.Mutex // held by the driver for one step, and by crash/restart
	nodes   map[multiraft.NodeID]*testNode
	members map[multiraft.GroupID][]multiraft.NodeID // initial members
	step    uint64
	crashes int
	// now is step, for the hosts' lease clock (stepClock), read without mu.
	now atomic.Uint64

	stopDriver chan struct{}
	driverDone chan struct{}
}

func newCluster(tb testing.TB, seed uint64, n int, tweak func(*multiraft.Config)) *cluster {
	tb.Helper()
	c := &cluster{
		t:          tb,
		net:        memnet.New(seed),
		tweak:      tweak,
		ticksEvery: 4,
		nodes:      make(map[multiraft.NodeID]*testNode),
		members:    make(map[multiraft.GroupID][]multiraft.NodeID),
	}
	for i := 1; i <= n; i++ {
		id := multiraft.NodeID(i)
		c.nodes[id] = &testNode{id: id, fs: vfs.NewCrashableMem(), fp: &multiraft.Failpoints{}}
		c.openNode(c.nodes[id])
	}
	tb.Cleanup(c.close)
	return c
}

func testLogger() *slog.Logger {
	if os.Getenv("SHARDKIT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// openNode opens the node's database and host and every group it had.
// Called with c.mu held (or before the driver starts).
func (c *cluster) openNode(n *testNode) {
	c.t.Helper()
	fs := errorfs.Wrap(n.fs, fullDisk(n.diskFull.Load))
	db, err := storage.Open("db", storage.Options{FS: fs, CacheBytes: 8 << 20, MemTableBytes: 4 << 20})
	if err != nil {
		c.t.Fatalf("node %d: %v", n.id, err)
	}
	cfg := multiraft.Config{
		NodeID:      n.id,
		DB:          db,
		FS:          fs,
		SnapshotDir: "snapshots",
		// Every entry of 16 bytes or more is sideloaded (the default is
		// 256 KiB): the tests' commands run through the files, crashes
		// and full disks included.
		SideloadDir:      "sideloaded",
		SideloadMinBytes: 16,
		Transport:        c.net.Endpoint(n.id),
		Logger:           testLogger(),
		ManualProcessing: true,
		ManualTicks:      true,
		Failpoints:       n.fp,
		OnFatal:          func(err error) { n.fatal.Store(&err) },
	}
	if c.tweak != nil {
		c.tweak(&cfg)
	}
	if cfg.Clock == nil {
		// Leases and vote refusals (doc.go, "Lease reads") measured in the
		// hosts' ticks.
		cfg.TickInterval, cfg.Clock = testTick, c.stepClock
	}
	h, err := multiraft.NewHost(cfg)
	if err != nil {
		c.t.Fatalf("node %d: %v", n.id, err)
	}
	if err := h.Start(); err != nil {
		c.t.Fatalf("node %d: %v", n.id, err)
	}
	n.db, n.host, n.alive = db, h, true
	n.incarnation++
	old := n.memberArg
	n.groups = make(map[multiraft.GroupID]*multiraft.Group)
	n.sms = make(map[multiraft.GroupID]*kvsm.SM)
	n.memberArg = make(map[multiraft.GroupID][]multiraft.NodeID)
	for gid, members := range old {
		c.openGroupOn(n, gid, members)
	}
	c.net.Register(n.id, h)
}

func (c *cluster) openGroupOn(n *testNode, gid multiraft.GroupID, members []multiraft.NodeID) {
	c.t.Helper()
	sm := kvsm.New(gid)
	g, err := n.host.OpenGroup(multiraft.GroupConfig{ID: gid, Members: members, StateMachine: sm})
	if err != nil {
		c.t.Fatalf("node %d group %d: %v", n.id, gid, err)
	}
	n.groups[gid] = g
	n.sms[gid] = sm
	n.memberArg[gid] = members
}

// addGroup creates group gid with members as initial voters.
func (c *cluster) addGroup(gid multiraft.GroupID, members ...multiraft.NodeID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[gid] = members
	for _, id := range members {
		c.openGroupOn(c.nodes[id], gid, members)
	}
}

// joinGroup opens gid, empty, on node id (after a conf change added it).
func (c *cluster) joinGroup(gid multiraft.GroupID, id multiraft.NodeID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.openGroupOn(c.nodes[id], gid, nil)
}

// runStep is one step of the driver.
func (c *cluster) runStep() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step++
	c.now.Store(c.step)
	worked := c.net.Deliver() > 0
	for _, id := range c.ids() {
		n := c.nodes[id]
		if !n.alive {
			continue
		}
		if c.step%c.ticksEvery == 0 {
			n.host.Tick()
		}
		if n.host.ProcessReady() {
			worked = true
		}
	}
	return worked
}

// testTick is the nominal Config.TickInterval of the harness's hosts.
const testTick = 100 * time.Millisecond

// stepClock is a lease clock (Config.Clock) for the harness: it advances a
// tick's worth every ticksEvery steps, as the hosts tick, so a lease is
// measured in the ticks the other members count (messages are delayed in
// steps too).
func (c *cluster) stepClock() time.Duration {
	return time.Duration(c.now.Load()) * testTick / time.Duration(c.ticksEvery)
}

func (c *cluster) ids() []multiraft.NodeID {
	ids := make([]multiraft.NodeID, 0, len(c.nodes))
	for id := range c.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// start runs the driver in the background until the test ends.
func (c *cluster) start() {
	c.stopDriver = make(chan struct{})
	c.driverDone = make(chan struct{})
	go func() {
		defer close(c.driverDone)
		for {
			select {
			case <-c.stopDriver:
				return
			default:
			}
			if !c.runStep() {
				time.Sleep(20 * time.Microsecond) // idle: let clients run
			}
		}
	}()
}

func (c *cluster) close() {
	if c.stopDriver != nil {
		close(c.stopDriver)
		<-c.driverDone
		c.stopDriver = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.alive {
			n.host.Stop()
			_ = n.db.Close()
			n.alive = false
		}
	}
}

// crash kills a node: it stops at once and keeps only what it had synced.
func (c *cluster) crash(id multiraft.NodeID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashLocked(id)
}

func (c *cluster) crashLocked(id multiraft.NodeID) {
	n := c.nodes[id]
	if !n.alive {
		return
	}
	c.net.Unregister(id)
	for _, g := range n.groups {
		n.leaseReads += g.Status().LeaseReads
	}
	n.host.Stop()
	// What survives a crash: everything synced, and a random part of what
	// was written but not synced (Pebble recovers its log up to the first
	// missing piece, so a prefix of the unsynced writes).
	c.crashes++
	cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: []int{0, 50, 100}[c.crashes%3]}
	if cfg.UnsyncedDataPercent > 0 {
		cfg.RNG = rand.New(rand.NewPCG(uint64(c.crashes), 7))
	}
	clone := n.fs.CrashClone(cfg)
	_ = n.db.Close()
	n.fs, n.alive = clone, false
}

// restart reopens a crashed node from what survived on its disk.
func (c *cluster) restart(id multiraft.NodeID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.openNode(c.nodes[id])
}

func (c *cluster) group(id multiraft.NodeID, gid multiraft.GroupID) *multiraft.Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id].groups[gid]
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// leader waits until the live members of gid agree on one leader, and returns it.
func (c *cluster) leader(gid multiraft.GroupID, among ...multiraft.NodeID) multiraft.NodeID {
	c.t.Helper()
	var lead multiraft.NodeID
	waitFor(c.t, 20*time.Second, fmt.Sprintf("a leader of group %d", gid), func() bool {
		lead = 0
		c.mu.Lock()
		defer c.mu.Unlock()
		ids := among
		if len(ids) == 0 {
			ids = c.ids()
		}
		for _, id := range ids {
			n := c.nodes[id]
			g := n.groups[gid]
			if !n.alive || g == nil {
				continue
			}
			l := g.Leader()
			if l == 0 || (lead != 0 && l != lead) {
				return false
			}
			lead = l
		}
		return lead != 0 && c.nodes[lead].alive && c.nodes[lead].groups[gid] != nil &&
			c.nodes[lead].groups[gid].Status().Role == "leader"
	})
	return lead
}

// currentLeader waits until some live member of gid is leader and returns
// the one with the highest term. Members removed from the group may keep a
// stale view; this does not ask them to agree.
func (c *cluster) currentLeader(gid multiraft.GroupID) multiraft.NodeID {
	c.t.Helper()
	var lead multiraft.NodeID
	waitFor(c.t, 20*time.Second, fmt.Sprintf("a leader of group %d", gid), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		var term uint64
		lead = 0
		for _, id := range c.ids() {
			n := c.nodes[id]
			g := n.groups[gid]
			if !n.alive || g == nil {
				continue
			}
			if st := g.Status(); st.Role == "leader" && st.Term > term {
				lead, term = id, st.Term
			}
		}
		return lead != 0
	})
	return lead
}

// propose proposes a kv command on node id and returns its result.
func (c *cluster) propose(ctx context.Context, id multiraft.NodeID, gid multiraft.GroupID, cmd kvsm.Command) (kvsm.Result, error) {
	g := c.group(id, gid)
	if g == nil {
		return kvsm.Result{}, fmt.Errorf("node %d has no group %d", id, gid)
	}
	r, err := multiraft.ProposeAs[kvsm.Result](ctx, g, cmd.Encode())
	if err != nil {
		return kvsm.Result{}, err
	}
	return r, r.Err
}

// mustPropose proposes through the current leader, retrying dropped proposals.
func (c *cluster) mustPropose(gid multiraft.GroupID, cmd kvsm.Command) kvsm.Result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		lead := c.currentLeader(gid)
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := c.propose(pctx, lead, gid, cmd)
		pcancel()
		if err == nil {
			return r
		}
		if ctx.Err() != nil {
			c.t.Fatalf("propose %q: %v", cmd.Key, err)
		}
	}
}

// read reads a key from a node's state machine without Raft.
func (c *cluster) read(id multiraft.NodeID, gid multiraft.GroupID, key string) (string, bool) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[id]
	v, ok, err := n.sms[gid].Read(n.db, []byte(key))
	if err != nil {
		c.t.Fatalf("node %d read %q: %v", id, key, err)
	}
	return string(v), ok
}

// waitConverged waits until every live member of gid has applied as far as
// the leader has committed.
func (c *cluster) waitConverged(gid multiraft.GroupID, members ...multiraft.NodeID) {
	c.t.Helper()
	lead := c.currentLeader(gid)
	commit := c.group(lead, gid).Status().Commit
	for _, id := range members {
		g := c.group(id, gid)
		waitFor(c.t, 20*time.Second, fmt.Sprintf("node %d to apply %d in group %d", id, commit, gid), func() bool {
			return g.Applied() >= commit
		})
		// The cheap accessor agrees: a member commits what it applied.
		if applied, cm := g.Applied(), g.Commit(); cm < applied || cm < commit {
			c.t.Fatalf("node %d group %d: Commit() %d, applied %d, the leader's commit %d", id, gid, cm, applied, commit)
		}
	}
}

func put(k, v string) kvsm.Command {
	return kvsm.Command{Op: kvsm.OpPut, Key: []byte(k), Value: []byte(v)}
}

func appendCmd(k, v string) kvsm.Command {
	return kvsm.Command{Op: kvsm.OpAppend, Key: []byte(k), Value: []byte(v)}
}

func getCmd(k string) kvsm.Command {
	return kvsm.Command{Op: kvsm.OpGet, Key: []byte(k)}
}
