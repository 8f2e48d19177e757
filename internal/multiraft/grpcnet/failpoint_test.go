//go:build failpoints

package grpcnet_test

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/internal/failpoint"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/grpcnet"
)

// A cut link carries nothing until it is mended, whichever end drops:
// a follower cut off by its peers' raftDropTo, then by its own
// raftDropFrom, misses the writes made meanwhile and catches up once the
// failpoints are removed.
func TestFailpointsCutRaftLinks(t *testing.T) {
	t.Parallel()
	fps := map[multiraft.NodeID]*failpoint.Points{}
	for id := multiraft.NodeID(1); id <= 3; id++ {
		fps[id] = &failpoint.Points{}
	}
	c := newGRPCCluster(t, 3, func(_ *multiraft.Config, tcfg *grpcnet.Config, _ *[]grpc.ServerOption) {
		tcfg.Failpoints = fps[tcfg.NodeID]
	})
	c.put("a", "1")
	for id := range c.nodes {
		c.waitValue(id, "a", "1")
	}
	lead := c.leader()
	f := lead%3 + 1
	drop := func() error { return errors.New("cut") }
	var others []multiraft.NodeID
	for id := range c.nodes {
		if id != f {
			others = append(others, id)
		}
	}

	missesThenCatchesUp := func(key, value string, cut, mend func()) {
		t.Helper()
		cut()
		c.put(key, value)
		for _, id := range others {
			c.waitValue(id, key, value)
		}
		// The others applied it; a follower that hears its leader has it
		// within a few ticks of 20ms.
		time.Sleep(500 * time.Millisecond)
		nd := c.nodes[f]
		c.mu.Lock()
		_, ok, err := nd.sm.Read(nd.db, []byte(key))
		c.mu.Unlock()
		if err != nil || ok {
			t.Fatalf("node %d has %s (err %v) although its links are cut", f, key, err)
		}
		mend()
		c.waitValue(f, key, value)
	}

	// The senders drop what they send to f.
	missesThenCatchesUp("b", "2", func() {
		for _, id := range others {
			fps[id].Set(grpcnet.FailpointDropTo+c.nodes[f].addr, drop)
		}
	}, func() {
		for _, id := range others {
			fps[id].Set(grpcnet.FailpointDropTo+c.nodes[f].addr, nil)
		}
	})
	// f drops what it receives from the others.
	missesThenCatchesUp("c", "3", func() {
		for _, id := range others {
			fps[f].Set(grpcnet.FailpointDropFrom+c.nodes[id].addr, drop)
		}
	}, func() {
		for _, id := range others {
			fps[f].Set(grpcnet.FailpointDropFrom+c.nodes[id].addr, nil)
		}
	})
}
