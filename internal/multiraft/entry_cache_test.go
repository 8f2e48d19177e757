package multiraft

import (
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Over its limit the cache keeps the newest entries, its byte count stays
// exact, and its slices stay bounded (appends do not copy the whole cache).
func TestEntryCacheStaysBounded(t *testing.T) {
	e := func(i uint64) *raftpb.Entry {
		return &raftpb.Entry{Index: new(i), Term: new(uint64(1)), Data: make([]byte, 100)}
	}
	one := proto.Size(e(1000))
	c := entryCache{maxBytes: 10 * one}
	for i := uint64(1); i <= 5000; i++ {
		c.append([]*raftpb.Entry{e(i)})
		sum := 0
		for _, s := range c.sizes {
			sum += s
		}
		if sum != c.bytes || c.bytes > c.maxBytes {
			t.Fatalf("after %d: bytes %d, sizes sum %d, limit %d", i, c.bytes, sum, c.maxBytes)
		}
		if got, n, ok := c.get(i); !ok || got.GetIndex() != i || n != proto.Size(got) {
			t.Fatalf("after %d: newest entry not cached", i)
		}
		if cap(c.ents) > 64 {
			t.Fatalf("after %d: capacity %d for %d entries", i, cap(c.ents), len(c.ents))
		}
	}
	if c.first() != 5000-uint64(len(c.ents))+1 || len(c.ents) < 9 {
		t.Fatalf("cache holds [%d, +%d)", c.first(), len(c.ents))
	}
	c.truncateFront(4996)
	if c.first() != 4996 || len(c.ents) != 5 {
		t.Fatalf("after truncateFront: [%d, +%d)", c.first(), len(c.ents))
	}
}
