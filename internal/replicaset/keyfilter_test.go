package replicaset

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
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

// A tuple a move's copy brings is found by the next write: the copy adds
// it to the bucket's filter (keyfilter.go, 2). Activating the bucket
// deletes its tombstones, not its tuples: the filter stays.
func TestACopiedTupleIsFound(t *testing.T) {
	dst := filtered(t)
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*rspb.Space{offersSpace(1)}}}})
	const b = 5
	dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
	// A look at the bucket while it receives builds its filter.
	op := insertOp(t, offer(1, "x", 1))
	op.Prev = &rspb.PrevFact{} // not on the source
	dst.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{op}})
	if dst.sm.filters.buckets[b] == nil {
		t.Fatal("no filter of the receiving bucket after a look at it")
	}
	tp := offer(1, "a", 1)
	dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunk{CopyChunk: &rspb.CopyChunk{Bucket: b, Generation: 2, Last: true,
		Tuples: []*rspb.CopiedTuple{{SpaceId: 1, Key: key(t, tp[0], tp[1]), Version: 9, Tuple: enc(tp)}}}}})
	if o := dst.setBucket(b, rspb.BucketState_STATE_ACTIVE, 2, ""); !o.Changed {
		t.Fatalf("ACTIVE: %+v", o)
	}
	dst.refused(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 2))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
	if n, _ := dst.sm.Count(dst.db, 1); n != 2 {
		t.Fatalf("count %d after the copy, want 2 (x and a)", n)
	}
}

// A batch that is dropped (its commit failed) takes the filters with it:
// one built inside it from the batch's view (a key deleted there) would
// say "absent" of a key the database still holds (keyfilter.go, 3).
func TestADroppedBatchDropsTheFiltersItBuilt(t *testing.T) {
	f := filtered(t)
	f.setup()
	f.sm.filters.minCap = 1 // a filter of one key is full at two: built again at the third
	f.ok(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "a", 1))}})
	k := key(t, offer(4, "a", 1)[0], offer(4, "a", 1)[1])
	b := f.db.NewIndexedBatch()
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
	if f.sm.filters.buckets[4] == nil || !f.sm.filters.absent(&applier{sm: f.sm, b: b}, 4, f.sm.k.tuple(4, 1, k)) {
		t.Fatal("the batch did not rebuild bucket 4's filter without a: the test sets up nothing")
	}
	_ = b.Close()
	f.sm.ApplyDone(false)
	// a is still stored: inserting it again is refused.
	f.refused(&rspb.Batch{Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "a", 2))}}, rspb.Refusal_CODE_DUPLICATE_KEY, "")
}
