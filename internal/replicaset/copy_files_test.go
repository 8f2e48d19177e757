package replicaset

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// The tests of the copy's apply pass with the copy as tables too: the
// same rows, the same counts, the same answers.
func TestTheCopyTestsPassWithCopyTables(t *testing.T) {
	fixtureCopyTables = true
	defer func() { fixtureCopyTables = false }()
	for name, test := range map[string]func(*testing.T){
		"prev semantics":       TestABucketMovesWithPrevSemantics,
		"batched steps":        TestBatchedStepsApplyEachBucketOnItsOwn,
		"copy lookups":         TestTheCopySkipsLookupsOnlyWhenNothingCanBeThere,
		"request ids":          TestRequestIDsMoveWithTheirBucket,
		"revisions":            TestABucketsRevisionContinuesAcrossMoves,
		"key filters":          TestAReceivingBucketGetsAFilterOnceItsCopyIsComplete,
		"same log, same state": TestTheSameLogGivesTheSameStateWhateverTheRuns,
		"history":              TestABucketsHistoryMovesWithIt,
		"restore":              TestABackupRestoresIntoAnActiveBucket,
	} {
		t.Run(name, test)
	}
}

// copyFixture is a destination receiving bucket copyBucket from a source
// that holds a, b, c and d, and the source's tuples of it.
func copyFixture(t *testing.T) (dst *fixture, chunk []*rspb.CopiedTuple, keyOf func(id string) []byte) {
	t.Helper()
	src := newFixture(t)
	src.setup()
	dst = newFixture(t)
	dst.tables = true
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	for _, id := range []string{"a", "b", "c", "d"} {
		src.ok(&rspb.Batch{Bucket: copyBucket, Ops: []*rspb.Op{insertOp(t, offer(1, id, 1))}})
	}
	src.setBucket(copyBucket, rspb.BucketState_STATE_SENDING, 2, "dst")
	dst.setBucket(copyBucket, rspb.BucketState_STATE_RECEIVING, 2, "src")
	keyOf = func(id string) []byte { return key(t, tuple.Uint(1), tuple.String(id)) }
	return dst, src.chunk(copyBucket), keyOf
}

const copyBucket = 7

// rowsOf is what a fixture holds of bucket b, as "id=price" in key order.
func rowsOf(t *testing.T, f *fixture, b uint32) string {
	t.Helper()
	ts, _, err := f.sm.Range(f.db, b, 1, KeyRange{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, st := range ts {
		tp, err := tuple.DecodeTuple(st.Tuple)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tp[1].String()+"="+tp[2].String())
	}
	return strings.Join(out, " ")
}

func ingested(f *fixture) uint64 { return f.db.Metrics().Ingest.Count }

// A copy table's rows are applied without the keys the destination wrote
// or deleted during the copy: a write made there is not undone, a deleted
// tuple does not come back, and the counts are the bucket's rows. A table
// whose range holds such keys goes through the apply batch, not an ingest.
func TestACopyTableLeavesOutTheKeysHeldHere(t *testing.T) {
	dst, chunk, keyOf := copyFixture(t)
	// During the copy: a replaced on the destination, b deleted there.
	a := insertOp(t, offer(1, "a", 5))
	a.Kind, a.Prev = rspb.OpKind_OP_KIND_REPLACE, &rspb.PrevFact{}
	dst.ok(&rspb.Batch{Bucket: copyBucket, Ops: []*rspb.Op{a}})
	dst.ok(&rspb.Batch{Bucket: copyBucket, PrevGeneration: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: keyOf("b"),
		Prev: &rspb.PrevFact{Found: true, Version: chunk[1].GetVersion(), Tuple: chunk[1].GetTuple()}}}})
	before := ingested(dst)
	o := dst.copyChunk(copyBucket, 2, chunk...)
	if o.Refused != nil || o.Sent != 4 || o.Copied != 2 || o.BySpace[1] != 2 {
		t.Fatalf("copy = %+v, want 4 sent, 2 copied (c, d)", o)
	}
	if n := ingested(dst) - before; n != 0 {
		t.Fatalf("%d tables ingested, want none (the table's range holds a and b, written here)", n)
	}
	if got, want := rowsOf(t, dst, copyBucket), `"a"=5 "c"=1 "d"=1`; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
	dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: copyBucket, Generation: 2, Last: true}}}}})
	if n, err := dst.sm.storedCount(dst.db, copyBucket, 1); err != nil || n != 3 {
		t.Fatalf("stored count %d (%v), want 3", n, err)
	}
}

// A copy entry applied again after its batch was dropped (a crash after
// the ingest, before the commit) leaves the same rows, and the copied
// mark the same counts, as one applied once.
func TestACopyTableIngestedTwiceLeavesTheSameBucket(t *testing.T) {
	dst, chunk, _ := copyFixture(t)
	entry := dst.tabled(&rspb.Command{NowUnixMs: dst.now, Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: copyBucket, Generation: 2, Tuples: chunk}}}}})
	data, err := Encode(entry)
	if err != nil {
		t.Fatal(err)
	}
	dst.index++
	e := []multiraft.Entry{{Index: dst.index, Term: 1, Cmd: data}}
	b := dst.db.NewIndexedBatch()
	if _, err := dst.sm.Apply(b, e); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	dst.sm.ApplyDone(false)
	if err := dst.sm.load(dst.db); err != nil { // as a restart does
		t.Fatal(err)
	}
	b = dst.db.NewIndexedBatch()
	out, err := dst.sm.Apply(b, e)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	dst.sm.ApplyDone(true)
	if o := results(t, out)[0].Copies[0]; o.Refused != nil || o.Copied != 0 {
		t.Fatalf("the copy applied again = %+v, want nothing copied (the ingest was durable)", o)
	}
	if got, want := rowsOf(t, dst, copyBucket), `"a"=1 "b"=1 "c"=1 "d"=1`; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
	dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: copyBucket, Generation: 2, Last: true}}}}})
	if n, err := dst.sm.storedCount(dst.db, copyBucket, 1); err != nil || n != 4 {
		t.Fatalf("stored count %d (%v) after the copied mark, want 4", n, err)
	}
}

// A member without an ingest directory applies a copy table's rows
// through its batch: the same rows, nothing ingested.
func TestACopyTableWithoutAnIngestDirectoryGoesThroughTheBatch(t *testing.T) {
	dst, chunk, _ := copyFixture(t)
	dst.sm.ingestFS = nil
	before := ingested(dst)
	if o := dst.copyChunk(copyBucket, 2, chunk[1:]...); o.Refused != nil || o.Copied != 3 {
		t.Fatalf("copy = %+v, want 3 copied", o)
	}
	if n := ingested(dst) - before; n != 0 {
		t.Fatalf("%d tables ingested, want none", n)
	}
	if got, want := rowsOf(t, dst, copyBucket), `"b"=1 "c"=1 "d"=1`; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
}

// Tables holding a key of a bucket the entry does not copy, or out of
// order, are refused, all of them, naming what is wrong, and change
// nothing; a bucket not received at its chunk's generation has its rows
// left out.
func TestCopyTablesAreCheckedBeforeTheyAreIngested(t *testing.T) {
	dst, chunk, _ := copyFixture(t)
	other, err := dst.sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: copyBucket + 1, Tuples: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := dst.sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: copyBucket, Tuples: chunk[:2]}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := dst.sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: copyBucket, Tuples: chunk[1:]}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tables [][]byte
		why    string
	}{
		{other, "which the entry does not copy"},
		{append(slices.Clone(first), second...), "within or before the one before it"},
		{[][]byte{[]byte("not a table")}, "copy table refused"},
	} {
		out := dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Tables: c.tables,
			Chunks: []*rspb.CopyChunk{{Bucket: copyBucket, Generation: 2}}}}})[0].Copies
		if len(out) != 1 || out[0].Refused == nil || !strings.Contains(out[0].Refused.Error(), c.why) {
			t.Fatalf("tables that should be refused (%s): %+v", c.why, out)
		}
		if got := rowsOf(t, dst, copyBucket); got != "" {
			t.Fatalf("rows %s after refused tables", got)
		}
	}
	if o := dst.copyChunk(copyBucket, 3, chunk...); o.Refused == nil {
		t.Fatal("a copy at another generation was not refused")
	}
	if got := rowsOf(t, dst, copyBucket); got != "" {
		t.Fatalf("rows %s after a copy at another generation", got)
	}
}

// The leader leaves out of its tables the keys it holds a tuple or a
// tombstone of, so that its members ingest them as they are.
func TestTheLeadersTablesLeaveOutTheKeysItHolds(t *testing.T) {
	dst, chunk, keyOf := copyFixture(t)
	dst.ok(&rspb.Batch{Bucket: copyBucket, PrevGeneration: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: keyOf("c"),
		Prev: &rspb.PrevFact{Found: true, Version: chunk[2].GetVersion(), Tuple: chunk[2].GetTuple()}}}})
	tables, err := dst.sm.CopyTables(dst.db, []*rspb.CopyChunk{{Bucket: copyBucket, Tuples: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sst := range tables {
		c, err := openCopySST(dst.sm.k, map[uint32]bool{copyBucket: true}, sst)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		if err := c.each(func(k, _ []byte) error {
			for _, id := range []string{"a", "b", "c", "d"} {
				if bytes.Equal(k, dst.sm.k.tuple(copyBucket, 1, keyOf(id))) {
					ids = append(ids, id)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		c.close()
		got = append(got, strings.Join(ids, ","))
	}
	if g := strings.Join(got, " | "); g != "a,b,d" {
		t.Fatalf("tables %s, want a,b,d", g)
	}
}

// copiedRows is n copied tuples of space 1 of the offers fixture, ids
// prefix000000, prefix000001, ...
func copiedRows(t *testing.T, prefix string, n int) []*rspb.CopiedTuple {
	t.Helper()
	var out []*rspb.CopiedTuple
	for i := range n {
		tp := offer(1, fmt.Sprintf("%s%06d", prefix, i), 1)
		out = append(out, &rspb.CopiedTuple{SpaceId: 1, Key: key(t, tp[0], tp[1]), Version: 1, Tuple: enc(tp)})
	}
	return out
}

// A table spans the buckets of an entry while the leader holds no key
// between them; a key it holds ends a run of rows, and a run of at least
// copyTableRows goes in a table of its own, shorter ones together in one.
func TestTheLeadersTablesAreCutWhereItHoldsKeys(t *testing.T) {
	f := newFixture(t)
	f.setup()
	for _, n := range []int{copyTableRows, copyTableRows - 1} {
		chunks := func() []*rspb.CopyChunk {
			return []*rspb.CopyChunk{{Bucket: 10, Tuples: copiedRows(t, "a", n)}, {Bucket: 12, Tuples: copiedRows(t, "a", n)}}
		}
		tables, err := f.sm.CopyTables(nil, chunks())
		if err != nil || len(tables) != 1 {
			t.Fatalf("%d tables (%v) of two buckets with nothing between, want 1", len(tables), err)
		}
		if tables, err = f.sm.CopyTables(f.db, chunks()); err != nil || len(tables) != 1 {
			t.Fatalf("%d tables (%v) of two buckets with nothing between, want 1", len(tables), err)
		}
	}
	f.ok(&rspb.Batch{Bucket: 11, Ops: []*rspb.Op{insertOp(t, offer(1, "x", 1))}})
	for _, c := range []struct {
		rows, want int
	}{{copyTableRows, 2}, {copyTableRows - 1, 1}} {
		tables, err := f.sm.CopyTables(f.db, []*rspb.CopyChunk{{Bucket: 10, Tuples: copiedRows(t, "a", c.rows)}, {Bucket: 12, Tuples: copiedRows(t, "a", c.rows)}})
		if err != nil || len(tables) != c.want {
			t.Fatalf("%d tables (%v) of two buckets of %d rows with a tuple of this replicaset between, want %d", len(tables), err, c.rows, c.want)
		}
	}
}

// No copy table is ingested over a key the member holds, written by the
// time the leader built the tables or after (a write in flight): so no
// ingest overlaps the memtable, none is a flushable (a memtable rotation,
// which stalled the destination's writes when flushes fell behind), and
// every row arrives.
func TestNoCopyTableIsIngestedOverAKeyHeldHere(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		t.Run(fmt.Sprintf("in flight %v", inFlight), func(t *testing.T) {
			dst := newFixture(t)
			dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
			dst.setBucket(copyBucket, rspb.BucketState_STATE_RECEIVING, 2, "src")
			rows := copiedRows(t, "r", 2*copyTableRows+1)
			mid := rows[copyTableRows]
			write := func() {
				dst.ok(&rspb.Batch{Bucket: copyBucket, PrevGeneration: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: mid.GetKey(),
					Prev: &rspb.PrevFact{Found: true, Version: mid.GetVersion(), Tuple: mid.GetTuple()}, Tuple: enc(offer(1, fmt.Sprintf("r%06d", copyTableRows), 9))}}})
			}
			if !inFlight {
				write()
			}
			chunks := []*rspb.CopyChunk{{Bucket: copyBucket, Generation: 2, Tuples: rows}}
			tables, err := dst.sm.CopyTables(dst.db, chunks)
			if err != nil {
				t.Fatal(err)
			}
			wantTables, wantIngests := 2, uint64(1)
			if inFlight {
				write()
				wantTables, wantIngests = 1, 0
			}
			if len(tables) != wantTables {
				t.Fatalf("%d tables, want %d", len(tables), wantTables)
			}
			m0 := dst.db.Metrics()
			out := dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Tables: tables, Chunks: chunks}}})[0].Copies
			if len(out) != 1 || out[0].Refused != nil || out[0].Copied != 2*copyTableRows {
				t.Fatalf("copy = %+v, want %d copied", out, 2*copyTableRows)
			}
			m1 := dst.db.Metrics()
			if n := m1.Ingest.Count - m0.Ingest.Count; n != wantIngests {
				t.Fatalf("%d ingests, want %d", n, wantIngests)
			}
			if n := m1.Flush.AsIngestCount - m0.Flush.AsIngestCount; n != 0 {
				t.Fatalf("%d ingests overlapped the memtable", n)
			}
			ts, _, err := dst.sm.Range(dst.db, copyBucket, 1, KeyRange{}, 2*len(rows))
			if err != nil || len(ts) != len(rows) {
				t.Fatalf("%d rows (%v), want %d", len(ts), err, len(rows))
			}
			if got, want := string(ts[copyTableRows].Tuple), string(enc(offer(1, fmt.Sprintf("r%06d", copyTableRows), 9))); got != want {
				t.Fatal("the row written during the copy was overwritten by the copy")
			}
		})
	}
}

// Whatever bytes a copy entry's table holds, reading it returns a table
// or an error, never a panic.
func FuzzOpenCopySST(f *testing.F) {
	k := newKeys(7)
	sm := &SM{k: k}
	good, err := sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: 3, Tuples: []*rspb.CopiedTuple{
		{SpaceId: 1, Key: []byte("a"), Version: 1, Tuple: []byte("x")},
		{SpaceId: 2, Key: []byte("b"), Version: 2, Tuple: []byte("y")},
	}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good[0])
	f.Add(good[0][:len(good[0])/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, sst []byte) {
		c, err := openCopySST(k, map[uint32]bool{3: true}, sst)
		if err != nil {
			return
		}
		defer c.close()
		for _, tb := range c.buckets {
			if tb.bucket != 3 || tb.n == 0 || bytes.Compare(tb.first, tb.last) > 0 || bytes.Compare(tb.first, c.first) < 0 || bytes.Compare(tb.last, c.last) > 0 {
				t.Fatalf("table of bucket %d, %d keys, %q to %q (the table's: %q to %q)", tb.bucket, tb.n, tb.first, tb.last, c.first, c.last)
			}
		}
	})
}

// A bucket's change history moves with its copy (as tables or as events):
// the destination keeps the source's revisions, and a repeated copy
// changes none.
func TestABucketsHistoryMovesWithIt(t *testing.T) {
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	const b = 4
	for _, id := range []string{"a", "b", "c"} {
		src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, id, 1))}})
	}
	src.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "dst")
	dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
	history := func(f *fixture) (revs []uint64, evs [][]byte) {
		t.Helper()
		if _, err := f.sm.Events(f.db, b, 0, func(ev *rspb.Event) bool {
			v, err := ev.MarshalVT()
			if err != nil {
				t.Fatal(err)
			}
			revs, evs = append(revs, ev.GetRevision()), append(evs, v)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return revs, evs
	}
	want, evs := history(src)
	if len(want) != 3 {
		t.Fatalf("the source keeps revisions %v, want 3", want)
	}
	for range 2 { // the second copy repeats the first
		dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{
			{Bucket: b, Generation: 2, Tuples: src.chunk(b), Events: evs}}}}})
		if got, _ := history(dst); !slices.Equal(got, want) {
			t.Fatalf("the destination keeps revisions %v, want %v", got, want)
		}
	}
}
