package multiraft

import (
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// entryCache keeps the newest entries of one group's log in memory: a
// contiguous run of indexes, bounded by the total size of the entries.
// Entries are immutable once written, so the cache hands out the same
// pointers it holds.
type entryCache struct {
	maxBytes int
	ents     []*raftpb.Entry
	sizes    []int
	bytes    int
}

func (c *entryCache) first() uint64 {
	if len(c.ents) == 0 {
		return 0
	}
	return c.ents[0].GetIndex()
}

// get returns entry i and its encoded size.
func (c *entryCache) get(i uint64) (*raftpb.Entry, int, bool) {
	if len(c.ents) == 0 {
		return nil, 0, false
	}
	f := c.first()
	if i < f || i >= f+uint64(len(c.ents)) {
		return nil, 0, false
	}
	return c.ents[i-f], c.sizes[i-f], true
}

// append adds entries that were just made durable. Entries at or after the
// first new index are replaced; a gap before them empties the cache.
func (c *entryCache) append(ents []*raftpb.Entry) {
	if c.maxBytes <= 0 || len(ents) == 0 {
		return
	}
	first := ents[0].GetIndex()
	switch {
	case len(c.ents) == 0:
	case first < c.first() || first > c.first()+uint64(len(c.ents)):
		c.clear()
	default:
		keep := int(first - c.first())
		for _, s := range c.sizes[keep:] {
			c.bytes -= s
		}
		c.ents, c.sizes = c.ents[:keep], c.sizes[:keep]
	}
	for _, e := range ents {
		s := proto.Size(e)
		c.ents = append(c.ents, e)
		c.sizes = append(c.sizes, s)
		c.bytes += s
	}
	drop := 0
	for c.bytes > c.maxBytes && drop < len(c.ents)-1 {
		c.bytes -= c.sizes[drop]
		drop++
	}
	c.dropFront(drop)
}

// dropFront forgets the first n entries without copying the rest: append
// moves the live ones when it next grows the slices, so the cost per entry
// stays constant.
func (c *entryCache) dropFront(n int) {
	if n == 0 {
		return
	}
	clear(c.ents[:n]) // let the dropped entries be collected
	c.ents, c.sizes = c.ents[n:], c.sizes[n:]
}

// truncateFront forgets entries below index i.
func (c *entryCache) truncateFront(i uint64) {
	if len(c.ents) == 0 || i <= c.first() {
		return
	}
	drop := int(min(i-c.first(), uint64(len(c.ents))))
	for _, s := range c.sizes[:drop] {
		c.bytes -= s
	}
	c.dropFront(drop)
}

func (c *entryCache) clear() {
	c.ents, c.sizes, c.bytes = nil, nil, 0
}
