package replicaset

import (
	"bytes"
	"hash/maphash"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// keyFilters keeps, for the buckets it can afford, a Bloom filter of the
// tuple keys the bucket may hold, so that a write's look at a key that is
// not there (an insert of a new key, a replace that makes one) answers
// "no tuple" without searching the database. Pebble's lookup of an absent
// key walks the skiplist of every memtable, which costs 10–20 µs on this
// project's machines once a memtable holds a few hundred thousand entries
// (15% of all the CPU of a 64-client replace load, on the three replicas
// together; docs/benchmarks.md, "Fuller rounds, fuller messages").
//
// The filters are the applying goroutine's alone, in memory only, and
// never change what a batch sees or does: a key a filter says may be
// there is read from the database, as without filters. What makes them
// safe is one invariant:
//
//	for a bucket with a filter, every tuple key stored in the database or
//	written by the batch being applied is in the filter.
//
// It holds because:
//
//  1. A filter is built by scanning the bucket's tuple keys through the
//     apply batch (which shows the database with the batch's writes).
//  2. set and setUncached add their key to the bucket's filter before
//     writing it. A deleted key stays in (a false positive until the next
//     build); so does a key of a batch that is dropped.
//  3. load (opening, a restored snapshot, a dropped batch) drops them all:
//     a restored database holds keys no filter saw.
//
// A range deletion of tuple keys (a bucket sent away, a space dropped)
// drops the filters of the buckets it touches: not for safety (a filter
// holding keys that are gone only answers "maybe" for them) but to give
// their memory back; a later look builds new ones.
//
// A filter is built the first time a look at its bucket misses the row
// cache, if the bucket holds at most maxFilterKeys tuples (the counts are
// in memory), is not being copied in, and the filters stay within their
// budget. Sized for twice the keys it starts with (20 bits a key), it is
// built again once it holds as many keys as it was sized for (10 bits a
// key). A bucket too large for one is looked at in the database, as
// before, and tried again once it has halved. A bucket being copied in (a
// receiving bucket whose copy is not complete) gets none: the copy adds
// its keys in thousands, so a filter sized for the keys there so far
// filled at once and every write rebuilt it, a Pebble iterator through
// the apply batch each time (a fifth of a destination's apply during a
// rebalance; docs/benchmarks.md, "Where a destination's rounds went").
type keyFilters struct {
	seed    maphash.Seed
	budget  int64 // bytes of filter bits, all buckets
	maxKeys int64 // the most tuples of a bucket with a filter (maxFilterKeys)
	minCap  int   // the fewest keys a filter is sized for (minFilterKeys)
	size    int64
	buckets map[uint32]*keyFilter
	tooBig  map[uint32]int64 // bucket → its tuple count when found too big

	scanBudget int // keys the builds of one Apply may scan (filterScanBudget)
	scanned    int // keys the builds of this Apply scanned
}

// filterScanBudget bounds the tuple keys that builds scan within one
// Apply (one run of a raft round's committed entries on this member; a
// round has one or two), all buckets together; the first build of an
// Apply always runs. A build reads its bucket through a Pebble iterator,
// 10-20 µs a key on a loaded machine: when a rebalance had just brought
// 1,500 buckets, the first write to each built its filter, and a round of
// 35 small writes took 83 ms to apply (docs/benchmarks.md, "Where a
// destination's rounds went"). A bucket whose build waits uses its full
// filter meanwhile (a full filter still holds every key, it only lets more
// absent ones through), or the database.
const filterScanBudget = 1024

// maxFilterKeys bounds the tuples of a bucket that gets a filter: building
// one scans them all, inside the apply of one batch.
const maxFilterKeys = 1 << 14

// minFilterKeys is the fewest keys a filter is sized for.
const minFilterKeys = 64

// DefaultKeyFilterBytes is the memory of the key filters of a state
// machine (SetKeyFilterBytes changes it): at 10–20 bits per key, 8 MiB
// covers 3–6 million tuples.
const DefaultKeyFilterBytes = 8 << 20

const (
	filterBitsPerKey = 10 // per key of its capacity, which is twice its keys at a build
	filterHashes     = 7
)

type keyFilter struct {
	bits  []uint64
	nbits uint64
	cap   int // keys it was sized for
	keys  int // keys in it: those it was built from and those added since
}

func newKeyFilters(budget int64) *keyFilters {
	return &keyFilters{seed: maphash.MakeSeed(), budget: budget, maxKeys: maxFilterKeys, minCap: minFilterKeys,
		buckets: map[uint32]*keyFilter{}, tooBig: map[uint32]int64{}, scanBudget: filterScanBudget}
}

// startApply begins the scan budget of an Apply.
func (fs *keyFilters) startApply() { fs.scanned = 0 }

// absent reports whether tuple key (of bucket b) is surely not stored:
// through a's batch, building b's filter first if it has none and may.
func (fs *keyFilters) absent(a *applier, b uint32, key []byte) bool {
	if fs.budget <= 0 {
		return false
	}
	f := fs.buckets[b]
	if f == nil || f.keys >= f.cap {
		if nf := fs.build(a, b); nf != nil {
			f = nf
		} else if f = fs.buckets[b]; f == nil { // kept only when the build waits for the budget
			return false
		}
	}
	return !f.mayContain(fs.hash(key))
}

// add puts a tuple key of bucket b into b's filter, if it has one (2).
// Only a key the filter did not hold counts towards its capacity, so
// writes over the same keys do not fill it.
func (fs *keyFilters) add(b uint32, key []byte) {
	if f := fs.buckets[b]; f != nil {
		if h := fs.hash(key); !f.mayContain(h) {
			f.insert(h)
			f.keys++
		}
	}
}

// dropRange drops the filters of the buckets whose tuple keys a range
// deletion [from, to) may touch.
func (fs *keyFilters) dropRange(k keys, from, to []byte) {
	if len(fs.buckets) == 0 {
		return
	}
	if b, ok := k.tupleBucket(from); ok && bytes.Equal(to, storage.PrefixEnd(from)) {
		fs.drop(b)
		return
	}
	tuples := k.sub(storage.DataTuple, 0)
	if bytes.Compare(to, tuples) <= 0 || bytes.Compare(from, storage.PrefixEnd(tuples)) >= 0 {
		return // no tuple key
	}
	fs.reset()
}

func (fs *keyFilters) drop(b uint32) {
	if f := fs.buckets[b]; f != nil {
		fs.size -= int64(len(f.bits) * 8)
		delete(fs.buckets, b)
	}
}

// reset drops every filter (3).
func (fs *keyFilters) reset() {
	clear(fs.buckets)
	clear(fs.tooBig)
	fs.size = 0
}

// build makes bucket b's filter from its tuple keys (1), or returns nil
// when the bucket is too large or the budget is spent.
func (fs *keyFilters) build(a *applier, b uint32) *keyFilter {
	if a.err != nil {
		return nil
	}
	if st := a.bucket(b); st.GetState() == rspb.BucketState_STATE_RECEIVING && !st.GetCopied() {
		fs.drop(b) // one built before the copy began would be refilled the same way
		return nil
	}
	var n int64
	for _, c := range a.sm.counts[b] {
		n += c
	}
	if was, ok := fs.tooBig[b]; ok && n > was/2 {
		return nil
	}
	if fs.scanned > 0 && fs.scanned+int(n) > fs.scanBudget {
		return nil // this Apply has scanned its share: the full filter, if any, serves meanwhile
	}
	delete(fs.tooBig, b)
	fs.drop(b)
	if n > fs.maxKeys {
		fs.tooBig[b] = n
		return nil
	}
	capacity := max(2*int(n), fs.minCap)
	words := (capacity*filterBitsPerKey + 63) / 64
	if fs.size+int64(words*8) > fs.budget {
		return nil
	}
	f := &keyFilter{bits: make([]uint64, words), nbits: uint64(words * 64), cap: capacity}
	prefix := a.sm.k.bucketTuples(b)
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		a.err = err
		return nil
	}
	for ok := it.First(); ok; ok = it.Next() {
		f.insert(fs.hash(it.Key()))
		f.keys++
	}
	fs.scanned += max(f.keys, 1)
	if err := it.Close(); err != nil {
		a.err = err
		return nil
	}
	fs.buckets[b] = f
	fs.size += int64(words * 8)
	return f
}

func (fs *keyFilters) hash(key []byte) uint64 { return maphash.Bytes(fs.seed, key) }

// probes returns the start and the step of a key's probes: bit i is
// (h1 + i*h2) mod nbits. The step is odd, and nbits a multiple of 64, so
// the filterHashes probes are distinct bits; an even step could make them
// few (a step that is a multiple of 64 made all seven one bit in a filter
// of 64, so one key in 64 was as good as a one-bit filter: a flaky test
// showed it).
func probes(h uint64) (h1, h2 uint64) { return h, (h>>32 | h<<32) | 1 }

// insert and mayContain probe filterHashes bits derived from one 64-bit
// hash (Kirsch and Mitzenmacher's double hashing, probes).
func (f *keyFilter) insert(h uint64) {
	h1, h2 := probes(h)
	for i := uint64(0); i < filterHashes; i++ {
		bit := (h1 + i*h2) % f.nbits
		f.bits[bit/64] |= 1 << (bit % 64)
	}
}

func (f *keyFilter) mayContain(h uint64) bool {
	h1, h2 := probes(h)
	for i := uint64(0); i < filterHashes; i++ {
		bit := (h1 + i*h2) % f.nbits
		if f.bits[bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}
