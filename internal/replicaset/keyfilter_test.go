package replicaset

import (
	"bytes"
	"fmt"
	"math/bits"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// A filter holds every key put in it, and few others.
func TestAKeyFilterHasNoFalseNegatives(t *testing.T) {
	fs := newKeyFilters(DefaultKeyFilterBytes)
	f := &keyFilter{bits: make([]uint64, 2000*filterBitsPerKey/64), nbits: 2000 * filterBitsPerKey / 64 * 64, cap: 2000}
	for i := range 1000 {
		f.insert(fs.hash(fmt.Appendf(nil, "in/%d", i)))
	}
	for i := range 1000 {
		if !f.mayContain(fs.hash(fmt.Appendf(nil, "in/%d", i))) {
			t.Fatalf("key %d is not in the filter it was put in", i)
		}
	}
	fp := 0
	for i := range 100_000 {
		if f.mayContain(fs.hash(fmt.Appendf(nil, "out/%d", i))) {
			fp++
		}
	}
	// 20 bits and 7 probes per key: about 0.1%.
	if fp > 1000 {
		t.Fatalf("%d of 100,000 absent keys pass the filter", fp)
	}
}

// filtered makes a fixture whose looks at tuples go through the key
// filters alone (no row cache).
func filtered(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.sm.SetRowCacheBytes(0)
	return f
}

// A member restored from a snapshot finds the snapshot's tuples: the
// filters built before the restore are dropped (keyfilter.go, 3).
func TestARestoredMemberFindsTheTuplesOfItsSnapshot(t *testing.T) {
	f, g := newFixture(t), filtered(t)
	f.setup()
	g.setup()
	g.ok(&rspb.Batch{Bucket: 7, Ops: []*rspb.Op{insertOp(t, offer(7, "a", 1))}}) // builds g's filter of bucket 7
	if g.sm.filters.buckets[7] == nil {
		t.Fatal("no filter of bucket 7 after a write to it")
	}
	f.ok(&rspb.Batch{Bucket: 7, Ops: []*rspb.Op{insertOp(t, offer(7, "b", 1))}})
	var buf bytes.Buffer
	if err := f.sm.Snapshot(t.Context(), f.db, &buf); err != nil {
		t.Fatal(err)
	}
	if err := g.sm.Restore(t.Context(), g.db, &buf); err != nil {
		t.Fatal(err)
	}
	g.refused(&rspb.Batch{Bucket: 7, Ops: []*rspb.Op{insertOp(t, offer(7, "b", 2))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
	g.ok(&rspb.Batch{Bucket: 7, Ops: []*rspb.Op{insertOp(t, offer(7, "a", 2))}}) // not in the snapshot
}

// A receiving bucket gets no key filter while its copy runs (the copy
// adds keys in thousands: a filter sized for the keys there so far would
// fill at once and every write would scan the bucket to build it again);
// a tuple the copy brings is found all the same, and once the copy is
// complete the next look builds a filter that holds the copied tuples.
func TestAReceivingBucketGetsAFilterOnceItsCopyIsComplete(t *testing.T) {
	dst := filtered(t)
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	const b = 5
	dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
	notOnSource := func(tp tuple.Tuple) *rspb.Op {
		op := insertOp(t, tp)
		op.Prev = &rspb.PrevFact{}
		return op
	}
	dst.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{notOnSource(offer(1, "x", 1))}})
	if dst.sm.filters.buckets[b] != nil {
		t.Fatal("a write built a filter of the bucket while its copy runs")
	}
	copied := func(tp tuple.Tuple, last bool) {
		t.Helper()
		outs := dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: b, Generation: 2, Last: last,
			Tuples: []*rspb.CopiedTuple{{SpaceId: 1, Key: key(t, tp[0], tp[1]), Version: 9, Tuple: enc(tp)}}}}}}})[0].Copies
		if len(outs) != 1 || outs[0].Refused != nil || outs[0].Copied != 1 {
			t.Fatalf("copy of %v: %+v", tp, outs)
		}
	}
	copied(offer(1, "a", 1), false)
	dst.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{notOnSource(offer(1, "y", 1))}})
	dst.refused(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{notOnSource(offer(1, "a", 2))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
	if dst.sm.filters.buckets[b] != nil {
		t.Fatal("a write built a filter of the bucket while its copy runs")
	}
	copied(offer(1, "c", 1), true) // the last chunk: the copy is complete
	dst.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "z", 1))}})
	if dst.sm.filters.buckets[b] == nil {
		t.Fatal("no filter of the bucket after a write once its copy is complete")
	}
	for _, k := range []string{"a", "c", "x", "y", "z"} {
		dst.refused(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, k, 2))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
	}
	if o := dst.setBucket(b, rspb.BucketState_STATE_ACTIVE, 2, ""); !o.Changed {
		t.Fatalf("ACTIVE: %+v", o)
	}
	dst.refused(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "c", 3))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
	if n, _ := dst.sm.Count(dst.db, 1); n != 5 {
		t.Fatalf("count %d after the copy, want 5 (a, c, x, y, z)", n)
	}
}

// A batch that is dropped (its commit failed) takes the filters with it:
// one built inside it from the batch's view (a key deleted there) would
// say "absent" of a key the database still holds (keyfilter.go, 3).
func TestADroppedBatchDropsTheFiltersItBuilt(t *testing.T) {
	// The set-up needs the filter rebuilt from the batch to say "absent"
	// of a, which a filter of 64 bits holding two keys gets wrong for
	// about one seed in 250 (a false positive): a fresh state machine (a
	// fresh seed) is tried then, up to 5 of them.
	for try := 1; ; try++ {
		f, b, k := filterBuiltInADroppedBatch(t)
		if !f.sm.filters.absent(&applier{sm: f.sm, b: b}, 4, f.sm.k.tuple(4, 1, k)) {
			_ = b.Close()
			if try == 5 {
				t.Fatal("the batch did not rebuild bucket 4's filter without a, in 5 tries: the test sets up nothing")
			}
			continue
		}
		_ = b.Close()
		f.sm.ApplyDone(false)
		// a is still stored: inserting it again is refused.
		f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "a", 2))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
		return
	}
}

// filterBuiltInADroppedBatch applies, in one batch b left uncommitted, a
// delete of tuple a (key k) of bucket 4 and two inserts, so that bucket 4's
// filter is built again from b's view, without a.
func filterBuiltInADroppedBatch(t *testing.T) (f *fixture, b *pebble.Batch, k []byte) {
	t.Helper()
	f = filtered(t)
	f.setup()
	f.sm.filters.minCap = 1 // a filter of one key is full at two: built again at the third
	f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "a", 1))}})
	k = key(t, offer(4, "a", 1)[0], offer(4, "a", 1)[1])
	b = f.db.NewIndexedBatch()
	var entries []multiraft.Entry
	for _, c := range []*rspb.Batch{
		{Bucket: 4, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: k}}}, // builds the filter: {a}
		{Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "b", 1))}},                          // {a, b}: full
		{Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "c", 1))}},                          // built again from the batch: {b}, then c
	} {
		data, err := Encode(&rspb.Command{NowUnixMs: f.now, Op: &rspb.Command_Batch{Batch: c}})
		if err != nil {
			t.Fatal(err)
		}
		f.index++
		entries = append(entries, multiraft.Entry{Index: f.index, Term: 1, Cmd: data})
	}
	if _, err := f.sm.Apply(b, entries); err != nil {
		t.Fatal(err)
	}
	if f.sm.filters.buckets[4] == nil {
		t.Fatal("the batch built no filter of bucket 4: the test sets up nothing")
	}
	return f, b, k
}

// The filter builds of one Apply scan at most the scan budget's keys, the
// first build always running: a bucket whose build waits reads the
// database meanwhile, and one whose filter is full goes on using it (it
// still holds every key); the next Apply builds on.
func TestFilterBuildsOfOneApplyStayWithinTheScanBudget(t *testing.T) {
	f := filtered(t)
	f.setup()
	ins := func(b uint32, id string, price float64) *rspb.Command {
		return &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(uint64(b), id, price))}}}}
	}
	for b := uint32(1); b <= 3; b++ {
		f.apply(ins(b, "a", 1), ins(b, "b", 1))
	}
	f.sm.filters.reset()
	f.sm.filters.scanBudget = 3
	// Bucket 1's build scans 2 keys; bucket 2's would make it 4: buckets 2
	// and 3 are read in the database, which still refuses duplicates.
	out := f.apply(ins(1, "c", 1), ins(2, "a", 2), ins(2, "c", 1), ins(3, "b", 2), ins(3, "c", 1))
	for i, want := range []rspb.Refusal_Code{0, rspb.Refusal_CODE_DUPLICATE_KEY, 0, rspb.Refusal_CODE_DUPLICATE_KEY, 0} {
		o := out[i].Batch
		if o == nil {
			t.Fatalf("write %d: %+v, no batch outcome", i+1, out[i])
		}
		if got := o.Result.GetRefusal().GetCode(); got != want {
			t.Fatalf("write %d: refusal %v, want %v", i+1, got, want)
		}
	}
	if f.sm.filters.buckets[1] == nil {
		t.Fatal("the first build of the Apply did not run")
	}
	if f.sm.filters.buckets[2] != nil || f.sm.filters.buckets[3] != nil {
		t.Fatal("builds ran past the scan budget")
	}
	// While the budget is spent, a bucket whose filter is full goes on
	// using it: it still says "maybe" of every stored key, and "absent" of
	// a key that is not there, with no database read.
	full := f.sm.filters.buckets[1]
	full.keys = full.cap
	f.sm.filters.scanned = f.sm.filters.scanBudget
	b := f.db.NewIndexedBatch()
	defer func() { _ = b.Close() }()
	a := &applier{sm: f.sm, b: b}
	tk := func(id string) []byte { return f.sm.k.tuple(1, 1, key(t, offer(1, id, 0)[0], offer(1, id, 0)[1])) }
	for _, id := range []string{"a", "b", "c"} {
		if f.sm.filters.absent(a, 1, tk(id)) {
			t.Fatalf("the full filter says the stored key %s is absent", id)
		}
	}
	if !f.sm.filters.absent(a, 1, tk("zz")) {
		t.Fatal("with the budget spent, a full filter did not answer for an absent key")
	}
	if f.sm.filters.buckets[1] != full {
		t.Fatal("bucket 1's full filter was rebuilt past the scan budget")
	}
	// The next Apply builds on.
	f.apply(ins(2, "d", 1))
	if f.sm.filters.buckets[2] == nil {
		t.Fatal("the next Apply did not build the filter that waited")
	}
}

// A key's probes are filterHashes distinct bits, whatever its hash: here
// one whose step is a multiple of 64 (it set a single bit of a 64-bit
// filter before the step was made odd).
func TestAKeysProbesAreDistinctBits(t *testing.T) {
	t.Parallel()
	for _, h := range []uint64{0x40 << 32, 0, 1 << 63, 0xffff_ffff_ffff_ffff, 0x80 << 32} {
		f := &keyFilter{bits: make([]uint64, 1), nbits: 64}
		f.insert(h)
		if n := bits.OnesCount64(f.bits[0]); n != filterHashes {
			t.Errorf("hash %#x set %d bits of 64, want %d", h, n, filterHashes)
		}
		if !f.mayContain(h) {
			t.Errorf("hash %#x inserted is not found", h)
		}
	}
}
