package grpcnet_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/grpcnet"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
	"github.com/shardkit/shardkit/internal/storage"
)

// g1 is the group every test here runs.
const g1 multiraft.GroupID = 1

// testLogger logs at debug to stderr when SHARDKIT_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("SHARDKIT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// waitFor polls cond until it holds, failing the test after timeout.
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

// grpcNode is a host with a real gRPC server on loopback and a real
// Pebble database in a temp dir, in the normal (worker and ticker) mode.
type grpcNode struct {
	id      multiraft.NodeID
	dir     string
	addr    string
	db      *pebble.DB
	host    *multiraft.Host
	tr      *grpcnet.Transport
	srv     *grpc.Server
	sm      *kvsm.SM
	group   *multiraft.Group
	members []multiraft.NodeID
}

type grpcCluster struct {
	t        testing.TB
	resolver *grpcnet.StaticResolver
	tweak    func(*multiraft.Config, *grpcnet.Config, *[]grpc.ServerOption)
	mu       sync.Mutex
	nodes    map[multiraft.NodeID]*grpcNode
}

func newGRPCCluster(tb testing.TB, n int, tweak func(*multiraft.Config, *grpcnet.Config, *[]grpc.ServerOption)) *grpcCluster {
	tb.Helper()
	c := &grpcCluster{t: tb, resolver: grpcnet.NewStaticResolver(nil), tweak: tweak, nodes: map[multiraft.NodeID]*grpcNode{}}
	var members []multiraft.NodeID
	for i := 1; i <= n; i++ {
		members = append(members, multiraft.NodeID(i))
	}
	for _, id := range members {
		nd := &grpcNode{id: id, dir: tb.TempDir(), addr: "127.0.0.1:0", members: members}
		c.nodes[id] = nd
		c.start(nd)
	}
	tb.Cleanup(func() {
		for _, nd := range c.nodes {
			c.stop(nd)
		}
	})
	return c
}

func (c *grpcCluster) start(nd *grpcNode) {
	c.t.Helper()
	lis, err := net.Listen("tcp", nd.addr)
	if err != nil {
		c.t.Fatalf("node %d listen %s: %v", nd.id, nd.addr, err)
	}
	nd.addr = lis.Addr().String()
	c.resolver.Set(nd.id, nd.addr)
	db, err := storage.Open(nd.dir+"/db", storage.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := multiraft.Config{
		NodeID: nd.id, DB: db, SnapshotDir: nd.dir + "/snapshots", Logger: testLogger(),
		TickInterval: 20 * time.Millisecond,
	}
	tcfg := grpcnet.Config{NodeID: nd.id, Resolver: c.resolver, Logger: testLogger(),
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
		BackoffMin:  10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	sopts := grpcnet.ServerOptions()
	if c.tweak != nil {
		c.tweak(&cfg, &tcfg, &sopts)
	}
	tr := grpcnet.New(tcfg)
	cfg.Transport = tr
	h, err := multiraft.NewHost(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	tr.SetHandler(h)
	srv := grpc.NewServer(sopts...)
	tr.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	if err := h.Start(); err != nil {
		c.t.Fatal(err)
	}
	nd.sm = kvsm.New(g1)
	g, err := h.OpenGroup(multiraft.GroupConfig{ID: g1, Members: nd.members, StateMachine: nd.sm})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	nd.db, nd.host, nd.tr, nd.srv, nd.group = db, h, tr, srv, g
	c.mu.Unlock()
}

func (c *grpcCluster) stop(nd *grpcNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if nd.host == nil {
		return
	}
	nd.srv.Stop()
	nd.host.Stop()
	nd.tr.Close()
	_ = nd.db.Close()
	nd.host = nil
}

func (c *grpcCluster) leader() multiraft.NodeID {
	c.t.Helper()
	var lead multiraft.NodeID
	waitFor(c.t, 30*time.Second, "a leader", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, nd := range c.nodes {
			if nd.host != nil && nd.group.Status().Role == "leader" {
				lead = nd.id
				return true
			}
		}
		return false
	})
	return lead
}

// put proposes key=value to the group through its leader.
func (c *grpcCluster) put(k, v string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lead := c.leader()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.nodes[lead].group.Propose(ctx, kvsm.Command{Op: kvsm.OpPut, Key: []byte(k), Value: []byte(v)}.Encode())
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("propose: %v", err)
		}
	}
}

func (c *grpcCluster) waitValue(id multiraft.NodeID, key, want string) {
	c.t.Helper()
	nd := c.nodes[id]
	waitFor(c.t, 30*time.Second, fmt.Sprintf("node %d to have %s=%.10s", id, key, want), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		v, ok, err := nd.sm.Read(nd.db, []byte(key))
		return err == nil && ok && string(v) == want
	})
}

func TestGRPCTransportReconnectsAfterPeerRestart(t *testing.T) {
	t.Parallel()
	c := newGRPCCluster(t, 3, nil)
	c.put("a", "1")
	for id := range c.nodes {
		c.waitValue(id, "a", "1")
	}
	lead := c.leader()
	follower := lead%3 + 1
	nd := c.nodes[follower]

	// Restart the follower on the same address: the others reconnect.
	c.stop(nd)
	c.put("b", "2")
	c.start(nd)
	c.waitValue(follower, "b", "2")
	c.put("c", "3")
	c.waitValue(follower, "c", "3")

	// Restart it on another port: the resolver learns the new address at
	// runtime and the others follow it.
	c.stop(nd)
	nd.addr = "127.0.0.1:0"
	c.start(nd)
	c.put("d", "4")
	c.waitValue(follower, "d", "4")

	// Restart the leader: a new one is elected and the old one rejoins.
	c.stop(c.nodes[lead])
	c.put("e", "5")
	c.start(c.nodes[lead])
	c.waitValue(lead, "e", "5")
}

func TestGRPCSnapshotInBoundedChunks(t *testing.T) {
	t.Parallel()
	// Every gRPC message is capped at 64 KiB: a snapshot of ~1.5 MB only
	// gets through if it is cut into chunks.
	c := newGRPCCluster(t, 3, func(cfg *multiraft.Config, tcfg *grpcnet.Config, sopts *[]grpc.ServerOption) {
		cfg.LogCompactionThreshold = 40
		cfg.LogCompactionKeep = 4
		cfg.MaxSizePerMsg = 16 << 10
		tcfg.MaxBatchBytes = 32 << 10
		tcfg.SnapshotChunkBytes = 16 << 10
		*sopts = []grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 10)}
	})
	lead := c.leader()
	down := lead%3 + 1
	c.stop(c.nodes[down])
	v := strings.Repeat("x", 4000)
	for i := range 400 {
		c.put(fmt.Sprintf("k%03d", i), v)
	}
	c.start(c.nodes[down])
	for i := range 400 {
		c.waitValue(down, fmt.Sprintf("k%03d", i), v)
	}
	if n := c.nodes[down].group.Status().SnapshotsRestored; n == 0 {
		t.Fatalf("member caught up without restoring a snapshot")
	}
}

// A closed transport ends its inbound streams, so the gRPC server's
// graceful stop, which waits for every handler, returns at once. It used
// to wait for the peers to close their streams (the instance's bound then
// cut it after 2 s, at every stop).
func TestClosedTransportLetsGracefulStopReturn(t *testing.T) {
	t.Parallel()
	c := newGRPCCluster(t, 3, nil)
	c.put("a", "1")
	for id := range c.nodes {
		c.waitValue(id, "a", "1") // every node has streams from the others
	}
	nd := c.nodes[c.leader()%3+1]
	c.mu.Lock()
	nd.host.Stop()
	nd.tr.Close()
	done := make(chan struct{})
	go func() {
		nd.srv.GracefulStop()
		close(done)
	}()
	c.mu.Unlock()
	select {
	case <-done:
	case <-time.After(20 * time.Second): // seconds of margin: it used to never return
		nd.srv.Stop()
		t.Fatal("GracefulStop did not return after the transport was closed: inbound raft streams still open")
	}
	c.stop(nd)
}
