package replicaset

import (
	"bytes"
	"encoding/binary"
	"strings"
	"sync"

	"github.com/shardkit/shardkit/internal/storage"
)

// DefaultRowCacheBytes is the row cache of a state machine made by New
// (SetRowCacheBytes changes it; the server gives it a quarter of
// --cache-size).
const DefaultRowCacheBytes = 64 << 20

// rowOverhead is what one cached row costs beside its key and value (the
// map's entry and the slice headers), for the budget.
const rowOverhead = 64

// rowCache keeps the stored values (version and tuple, or "no tuple") of
// the tuples the state machine wrote or read lately, so that a write's
// look at the tuple it replaces, and a point read, is a map lookup instead
// of a Pebble read (that read was a fifth of all the CPU of a replicated
// write; docs/benchmarks.md, "Block cache and row cache").
//
// The database stays the truth; the cache never holds a value the
// database does not hold or held at the last commit:
//
//   - The apply path (the group's applying goroutine) stages what a batch
//     writes and reads (every write of a tuple key goes through the
//     applier's set, del and delRange, but for a move's copy, which
//     drops the bucket instead: dropBucket) and makes it the cache's only at
//     ApplyDone(true), after the batch is committed and before the engine
//     answers the proposals and the reads waiting for it. A staged row is
//     what the batch sees, whatever the cache holds; a range deletion of a
//     bucket's tuples marks the bucket dirty for the rest of the batch (its
//     keys not staged since are read from the batch) and, at commit, moves
//     the bucket to a new generation: rows of an older one are misses.
//   - Readers (point reads of the database) look rows up, and fill a miss
//     with what they read from the database only if no commit came in
//     between (seq): a commit after their read overwrites the row or
//     outdates its generation anyway, and one before it is refused.
//   - A reload (a dropped batch, a snapshot) empties it.
type rowCache struct {
	max int64 // bytes; 0 or less: the cache is off

	// mu guards the committed rows: the applying goroutine changes them
	// under mu (commit, reset) and reads them under mu.RLock, readers read
	// them under mu.RLock and fill them under mu.
	mu   sync.RWMutex
	size int64
	rows map[string]cachedRow
	gen  map[uint32]uint32 // per bucket; a row of another generation is stale
	// seq is bumped by every commit and reset: a reader fills a row only
	// if seq did not change since before its database read.
	seq uint64

	// What the batch being applied wrote or read, until ApplyDone; only
	// the applying goroutine uses these.
	pending map[string]cachedRow // gen: the row's bucket
	dirty   map[uint32]bool
	// dirtyAll: a range deletion wider than one bucket's tuples (none
	// today); the commit empties the cache.
	dirtyAll bool
}

type cachedRow struct {
	v   []byte // the stored encoding; nil: no tuple at this key
	gen uint32 // in rows: the bucket's generation; in pending: the bucket
}

func newRowCache(max int64) *rowCache {
	return &rowCache{max: max, rows: map[string]cachedRow{}, gen: map[uint32]uint32{},
		pending: map[string]cachedRow{}, dirty: map[uint32]bool{}}
}

func (c *rowCache) on() bool { return c.max > 0 }

// tupleBucket returns the bucket of a tuple key of k (t/<bucket:4>...).
func (k keys) tupleBucket(key []byte) (uint32, bool) {
	n := len(k.prefix)
	if len(key) < n+2+4 || key[n] != storage.DataTuple || key[n+1] != '/' || !bytes.HasPrefix(key, k.prefix) {
		return 0, false
	}
	return binary.BigEndian.Uint32(key[n+2:]), true
}

// lookup returns what the cache knows of a tuple key as the batch sees
// it: the stored value (nil: no tuple) and true, or false when the
// database must be read.
func (c *rowCache) lookup(b uint32, key []byte) ([]byte, bool) {
	if !c.on() {
		return nil, false
	}
	if p, ok := c.pending[string(key)]; ok {
		return p.v, true
	}
	if c.dirtyAll || c.dirty[b] {
		return nil, false
	}
	v, ok, _ := c.committed(b, key)
	return v, ok
}

// committed looks a row up in the committed rows; seq is what a reader
// that misses passes to fill.
func (c *rowCache) committed(b uint32, key []byte) (v []byte, ok bool, seq uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r, ok := c.rows[string(key)]
	if !ok || r.gen != c.gen[b] {
		return nil, false, c.seq // a stale row stays until overwritten or evicted
	}
	return r.v, true, c.seq
}

// read is a reader's lookup: a copy of the stored value (nil: no tuple)
// and true, or false and the seq to fill the miss with.
func (c *rowCache) read(b uint32, key []byte) ([]byte, bool, uint64) {
	if !c.on() {
		return nil, false, 0
	}
	v, ok, seq := c.committed(b, key)
	if ok && v != nil {
		v = bytes.Clone(v) // readers' callers may keep or change it
	}
	return v, ok, seq
}

// fill adds what a reader read from the database after a miss at seq, if
// no commit came since and there is room, and reports whether it kept v
// (which must not change afterwards, then).
func (c *rowCache) fill(b uint32, key []byte, v []byte, seq uint64) bool {
	if !c.on() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seq != seq || c.size > c.max {
		return false
	}
	if old, ok := c.rows[string(key)]; ok {
		if old.gen == c.gen[b] {
			return false // an up-to-date row is there already
		}
		c.size -= rowSize(string(key), old.v)
	}
	c.rows[string(key)] = cachedRow{v: v, gen: c.gen[b]}
	c.size += rowSize(string(key), v)
	return true
}

// stage records what the batch wrote at a tuple key of bucket b (nil:
// no tuple).
func (c *rowCache) stage(b uint32, key []byte, v []byte) {
	if c.on() {
		c.pending[string(key)] = cachedRow{v: v, gen: b}
	}
}

// stageRead records what the batch read at a tuple key of bucket b, only
// from a clean bucket: then the batch has not changed the key and the read
// is what the database holds.
func (c *rowCache) stageRead(b uint32, key []byte, v []byte) {
	if c.on() && !c.dirtyAll && !c.dirty[b] {
		c.pending[string(key)] = cachedRow{v: v, gen: b}
	}
}

// stageRange records a range deletion [from, to) of the batch.
func (c *rowCache) stageRange(k keys, from, to []byte) {
	if !c.on() {
		return
	}
	b, ok := k.tupleBucket(from)
	if !ok || !bytes.Equal(to, storage.PrefixEnd(from)) {
		// Not under one bucket's tuples: either nothing of them (another
		// kind of key) or more than one bucket.
		tuples := k.sub(storage.DataTuple, 0)
		tuplesEnd := storage.PrefixEnd(tuples)
		if bytes.Compare(to, tuples) <= 0 || bytes.Compare(from, tuplesEnd) >= 0 {
			return
		}
		c.dirtyAll = true
		clear(c.pending)
		return
	}
	c.dirty[b] = true
	prefix := string(from)
	for key := range c.pending {
		if strings.HasPrefix(key, prefix) {
			delete(c.pending, key)
		}
	}
}

// dropBucket drops bucket b's rows from the cache as of this batch: a
// range deletion of its tuples, as far as the cache is concerned.
func (c *rowCache) dropBucket(k keys, b uint32) {
	if c.on() && !c.dirty[b] {
		from := k.bucketTuples(b)
		c.stageRange(k, from, storage.PrefixEnd(from))
	}
}

// commit makes the committed batch's rows the cache's.
func (c *rowCache) commit() {
	if !c.on() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if c.dirtyAll {
		c.dirtyAll = false
		clear(c.rows)
		c.size = 0
	}
	for b := range c.dirty {
		c.gen[b]++
	}
	clear(c.dirty)
	for key, p := range c.pending {
		if old, ok := c.rows[key]; ok {
			c.size -= rowSize(key, old.v)
		}
		c.rows[key] = cachedRow{v: p.v, gen: c.gen[p.gen]}
		c.size += rowSize(key, p.v)
	}
	clear(c.pending)
	if c.size > c.max {
		c.evict(c.max - c.max/10)
	}
}

// evict drops rows until the cache holds at most target bytes. Rows go in
// the map's iteration order, which Go randomizes: a random eviction,
// which keeps a hot row about as often as it is written or read again.
func (c *rowCache) evict(target int64) {
	for key, r := range c.rows {
		if c.size <= target {
			return
		}
		c.drop(key, r)
	}
}

func (c *rowCache) drop(key string, r cachedRow) {
	delete(c.rows, key)
	c.size -= rowSize(key, r.v)
}

// discard forgets the uncommitted batch's rows.
func (c *rowCache) discard() {
	clear(c.pending)
	clear(c.dirty)
	c.dirtyAll = false
}

// reset empties the cache (the database was reloaded or replaced).
func (c *rowCache) reset() {
	c.discard()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	clear(c.rows)
	clear(c.gen)
	c.size = 0
}

func rowSize(key string, v []byte) int64 { return int64(len(key) + len(v) + rowOverhead) }
