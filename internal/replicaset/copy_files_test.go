package replicaset

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

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
	other, _, err := dst.sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: copyBucket + 1, Tuples: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := dst.sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: copyBucket, Tuples: chunk[:2]}})
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := dst.sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: copyBucket, Tuples: chunk[1:]}})
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
	tables, _, err := dst.sm.CopyTables(dst.db, []*rspb.CopyChunk{{Bucket: copyBucket, Tuples: chunk}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sst := range tables {
		c, err := openCopySST(dst.sm.k, map[uint32]bool{copyBucket: true}, sst, false)
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
		tables, _, err := f.sm.CopyTables(nil, chunks())
		if err != nil || len(tables) != 1 {
			t.Fatalf("%d tables (%v) of two buckets with nothing between, want 1", len(tables), err)
		}
		if tables, _, err = f.sm.CopyTables(f.db, chunks()); err != nil || len(tables) != 1 {
			t.Fatalf("%d tables (%v) of two buckets with nothing between, want 1", len(tables), err)
		}
	}
	f.ok(&rspb.Batch{Bucket: 11, Ops: []*rspb.Op{insertOp(t, offer(1, "x", 1))}})
	for _, c := range []struct {
		rows, want int
	}{{copyTableRows, 2}, {copyTableRows - 1, 1}} {
		tables, _, err := f.sm.CopyTables(f.db, []*rspb.CopyChunk{{Bucket: 10, Tuples: copiedRows(t, "a", c.rows)}, {Bucket: 12, Tuples: copiedRows(t, "a", c.rows)}})
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
			tables, _, err := dst.sm.CopyTables(dst.db, chunks)
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
	ev, err := (&rspb.Event{Bucket: 3, Revision: 1}).MarshalVT()
	if err != nil {
		f.Fatal(err)
	}
	good, _, err := sm.CopyTables(nil, []*rspb.CopyChunk{{Bucket: 3, Tuples: []*rspb.CopiedTuple{
		{SpaceId: 1, Key: []byte("a"), Version: 1, Tuple: []byte("x")},
		{SpaceId: 2, Key: []byte("b"), Version: 2, Tuple: []byte("y")},
	}, Events: [][]byte{ev}}})
	if err != nil || len(good) != 2 {
		f.Fatalf("%d tables, %v; want the history's and the tuples'", len(good), err)
	}
	for _, g := range good {
		f.Add(g, false)
		f.Add(g, true)
		f.Add(g[:len(g)/2], true)
	}
	f.Add([]byte{}, false)
	f.Fuzz(func(t *testing.T, sst []byte, events bool) {
		named := map[uint32]bool{3: true}
		c, err := openCopySST(k, named, sst, events)
		if err != nil {
			return
		}
		defer c.close()
		for _, tb := range c.buckets {
			if tb.bucket != 3 || tb.tuples && tb.n == 0 || bytes.Compare(tb.first, tb.last) > 0 || bytes.Compare(tb.first, c.first) < 0 || bytes.Compare(tb.last, c.last) > 0 {
				t.Fatalf("table of bucket %d, %d keys, %q to %q (the table's: %q to %q)", tb.bucket, tb.n, tb.first, tb.last, c.first, c.last)
			}
		}
		// What a member takes from the table's summary is what reading
		// it gives.
		s, err := summedCopySST(k, named, sst, c.summary())
		if err != nil {
			t.Fatalf("the summary of a table read: %v", err)
		}
		if len(s.buckets) != len(c.buckets) || !bytes.Equal(s.first, c.first) || !bytes.Equal(s.last, c.last) {
			t.Fatalf("the summary gives %d buckets, %q to %q; the table %d, %q to %q", len(s.buckets), s.first, s.last, len(c.buckets), c.first, c.last)
		}
		for i, tb := range s.buckets {
			if r := c.buckets[i]; tb.bucket != r.bucket || tb.tuples != r.tuples || tb.n != r.n || !maps.Equal(tb.bySpace, r.bySpace) {
				t.Fatalf("bucket %d: the summary gives %+v, the table %+v", i, tb, r)
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

// sourceParts streams buckets from src as a source asked for tables
// keyed for group dst (SendBucketsRequest.table_group) sends them, in
// parts of at most limit tuples.
func sourceParts(t *testing.T, src *fixture, dst uint64, limit int, gen uint64, buckets ...uint32) []*rspb.SendBucketsResponse {
	t.Helper()
	source := &Storage{sm: src.sm, cfg: StorageConfig{ReplicasetID: "src", DB: src.db}}
	var parts []*rspb.SendBucketsResponse
	ch := &chunker{limit: limit, blocks: true, tables: &sourceTables{dst: newKeys(dst)}, flush: func(part *rspb.SendBucketsResponse) error {
		part = proto.CloneOf(part) // its tables' buffers are written into again
		parts = append(parts, part)
		return nil
	}}
	asked := map[uint32]bool{}
	for _, b := range buckets {
		asked[b] = true
	}
	remembered := src.sm.reqs.ofBuckets(asked)
	for _, b := range buckets {
		if err := source.chunkBucket(src.db, ch, &rspb.CopyChunk{Bucket: b, Generation: gen}, remembered[b]); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.send(); err != nil {
		t.Fatal(err)
	}
	return parts
}

// The source writes a bucket's tuples and history as tables with the
// destination's keys, and the destination's leader logs them as they
// came, with their summaries, where it holds no key in their range: the
// destination then holds the same rows, history, counts and request ids
// as the source, through one ingest. Where it holds a key there (a write
// or a delete made during the copy), the leader cuts the tables as it
// cuts its own, and the key keeps what the destination made of it.
func TestTheSourcesTablesAreLoggedAsTheyCame(t *testing.T) {
	const dstGroup = 9
	src := newFixture(t)
	src.setup()
	id := requestID(1)
	src.ok(&rspb.Batch{Bucket: 3, RequestId: id, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
	for _, b := range []uint32{3, 5} {
		for i := range 3 {
			src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint("b", i), float64(b)))}})
		}
		src.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "dst")
	}
	newDst := func() (*fixture, *Storage) {
		dst := newFixtureOf(t, dstGroup)
		dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
		for _, b := range []uint32{3, 5} {
			dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
		}
		return dst, &Storage{sm: dst.sm, cfg: StorageConfig{ReplicasetID: "dst", DB: dst.db, CopyTables: true}}
	}
	parts := sourceParts(t, src, dstGroup, 0, 2, 3, 5)
	if len(parts) != 1 || len(parts[0].GetTables()) != 2 {
		t.Fatalf("%d parts, the first with %d tables; want one part, a table of the history and one of the tuples", len(parts), len(parts[0].GetTables()))
	}
	for _, c := range parts[0].GetChunks() {
		if len(c.GetTuples()) > 0 || len(c.GetEvents()) > 0 {
			t.Fatalf("bucket %d's chunk carries %d tuples and %d events beside the tables", c.GetBucket(), len(c.GetTuples()), len(c.GetEvents()))
		}
	}

	dst, leader := newDst()
	cc, size, err := leader.checkedCopy(parts[0].GetChunks(), parts[0].GetTables())
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.GetTables()) != 2 || !bytes.Equal(cc.GetTables()[0], parts[0].GetTables()[0]) || !bytes.Equal(cc.GetTables()[1], parts[0].GetTables()[1]) {
		t.Fatalf("the leader logs %d tables, want the source's 2 as they came", len(cc.GetTables()))
	}
	if len(cc.GetSummaries()) != 2 || size == 0 {
		t.Fatalf("%d summaries, %d bytes of rows; want one summary a table and the rows' bytes", len(cc.GetSummaries()), size)
	}
	if s := cc.GetSummaries()[1].GetBuckets(); len(s) != 2 || s[0].GetBucket() != 3 || s[0].GetBySpace()[1] != 4 || s[1].GetBucket() != 5 || s[1].GetBySpace()[1] != 3 {
		t.Fatalf("the tuples' summary %v, want bucket 3's 4 tuples and bucket 5's 3", s)
	}
	before := ingested(dst)
	outs := dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: cc}})[0].Copies
	copied := 0
	for i, o := range outs {
		if o.Refused != nil {
			t.Fatalf("chunk %d refused: %v", i, o.Refused)
		}
		copied += o.Copied
	}
	if copied != 7 || ingested(dst)-before != 1 {
		t.Fatalf("%d tuples copied in %d ingests, want 7 in one", copied, ingested(dst)-before)
	}
	history := func(f *fixture, b uint32) (revs []uint64) {
		t.Helper()
		if _, err := f.sm.Events(f.db, b, 0, func(ev *rspb.Event) bool { revs = append(revs, ev.GetRevision()); return true }); err != nil {
			t.Fatal(err)
		}
		return revs
	}
	for _, b := range []uint32{3, 5} {
		if got, want := rowsOf(t, dst, b), rowsOf(t, src, b); got != want {
			t.Fatalf("bucket %d: the destination holds %s, the source %s", b, got, want)
		}
		if got, want := history(dst, b), history(src, b); !slices.Equal(got, want) || len(want) == 0 {
			t.Fatalf("bucket %d: the destination keeps revisions %v, the source %v", b, got, want)
		}
		n, err := dst.sm.storedCount(dst.db, b, 1)
		m, _ := src.sm.storedCount(src.db, b, 1)
		if err != nil || n != m {
			t.Fatalf("bucket %d: stored count %d (%v), the source's %d", b, n, err, m)
		}
	}
	if !dst.sm.reqs.has(3, id) {
		t.Fatal("the request id the source applied is not remembered at the destination")
	}

	// In parts of two tuples, each its own entry (the source writes each
	// part's tables into the buffers of the part before).
	dst, leader = newDst()
	parts = sourceParts(t, src, dstGroup, 2, 2, 3, 5)
	if len(parts) < 4 {
		t.Fatalf("%d parts of 2 tuples, want at least 4", len(parts))
	}
	for i, p := range parts {
		cc, _, err := leader.checkedCopy(p.GetChunks(), p.GetTables())
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		for j, o := range dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: cc}})[0].Copies {
			if o.Refused != nil {
				t.Fatalf("part %d, chunk %d refused: %v", i, j, o.Refused)
			}
		}
	}
	for _, b := range []uint32{3, 5} {
		if got, want := rowsOf(t, dst, b), rowsOf(t, src, b); got != want {
			t.Fatalf("in parts, bucket %d: the destination holds %s, the source %s", b, got, want)
		}
		if got, want := history(dst, b), history(src, b); !slices.Equal(got, want) {
			t.Fatalf("in parts, bucket %d: the destination keeps revisions %v, the source %v", b, got, want)
		}
	}

	// A destination that wrote b1 of bucket 5 during the copy.
	dst, leader = newDst()
	w := insertOp(t, offer(1, "b1", 50))
	w.Kind, w.Prev = rspb.OpKind_OP_KIND_REPLACE, &rspb.PrevFact{}
	dst.ok(&rspb.Batch{Bucket: 5, Ops: []*rspb.Op{w}})
	// And deleted b2 of bucket 3.
	b2 := key(t, tuple.Uint(1), tuple.String("b2"))
	dst.ok(&rspb.Batch{Bucket: 3, PrevGeneration: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: b2, Prev: prevOf(src, 3, b2)}}})
	parts = sourceParts(t, src, dstGroup, 0, 2, 3, 5)
	cc, _, err = leader.checkedCopy(parts[0].GetChunks(), parts[0].GetTables())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(cc.GetTables()[len(cc.GetTables())-1], parts[0].GetTables()[1]) {
		t.Fatal("the leader logged the source's table of tuples over a key it holds")
	}
	for i, o := range dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: cc}})[0].Copies {
		if o.Refused != nil {
			t.Fatalf("chunk %d refused: %v", i, o.Refused)
		}
	}
	if got, want := rowsOf(t, dst, 5), `"b0"=5 "b1"=50 "b2"=5`; got != want {
		t.Fatalf("bucket 5 holds %s, want %s", got, want)
	}
	if got, want := rowsOf(t, dst, 3), `"a"=1 "b0"=3 "b1"=3`; got != want {
		t.Fatalf("bucket 3 holds %s, want %s", got, want)
	}
}

// What the leader takes from a source, and what a member takes from a
// leader, is checked: a refusal names what is wrong, and the leader
// logs nothing.
func TestTheSourcesTablesAreChecked(t *testing.T) {
	const dstGroup = 9
	src := newFixture(t)
	src.setup()
	for _, b := range []uint32{3, 5} {
		src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
		src.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "dst")
	}
	dst := newFixtureOf(t, dstGroup)
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	for _, b := range []uint32{3, 5} {
		dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
	}
	leader := &Storage{sm: dst.sm, cfg: StorageConfig{ReplicasetID: "dst", DB: dst.db, CopyTables: true}}
	good := sourceParts(t, src, dstGroup, 0, 2, 3, 5)[0]
	ownKeys := sourceParts(t, src, 7, 0, 2, 3, 5)[0]
	// An event stored at a revision it does not name.
	lying := newCopyTable()
	ev, err := (&rspb.Event{Bucket: 3, Revision: 9}).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	if err := lying.set(newKeys(dstGroup), 3, false, newKeys(dstGroup).event(3, 8), ev); err != nil {
		t.Fatal(err)
	}
	lyingTable, err := lying.finish()
	if err != nil {
		t.Fatal(err)
	}
	withTuples := []*rspb.CopyChunk{{Bucket: 3, Generation: 2, Tuples: copiedRows(t, "z", 1)}, good.GetChunks()[1]}
	for _, c := range []struct {
		name   string
		chunks []*rspb.CopyChunk
		tables [][]byte
		why    string
	}{
		{"tuples beside the tables", withTuples, good.GetTables(), "carries tuples or events beside the source's tables"},
		{"the source's own keys", good.GetChunks(), ownKeys.GetTables(), "neither a tuple's nor a history's of this replicaset"},
		{"a bucket not named", good.GetChunks()[:1], good.GetTables(), "which the entry does not copy"},
		{"an event at another revision", good.GetChunks(), [][]byte{lyingTable}, "is of bucket 3, revision 9"},
		{"tables out of order", good.GetChunks(), [][]byte{good.GetTables()[1], good.GetTables()[0]}, "within or before the one before it"},
	} {
		_, _, err := leader.checkedCopy(c.chunks, c.tables)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.why) {
			t.Fatalf("%s: %v, want InvalidArgument naming %q", c.name, err, c.why)
		}
	}

	cc, _, err := leader.checkedCopy(good.GetChunks(), good.GetTables())
	if err != nil {
		t.Fatal(err)
	}
	sum := func(b uint32, tuples bool, first, last []byte) *rspb.CopyTableSummary {
		return &rspb.CopyTableSummary{Buckets: []*rspb.CopyTableBucket{{Bucket: b, Tuples: tuples, First: first, Last: last}}}
	}
	k := newKeys(dstGroup)
	for _, c := range []struct {
		name string
		sums []*rspb.CopyTableSummary
		why  string
	}{
		{"one summary of two tables", cc.GetSummaries()[:1], "1 summaries of 2 tables"},
		{"a bucket not named", []*rspb.CopyTableSummary{cc.GetSummaries()[0], sum(4, true, k.bucketTuples(4), k.bucketTuples(4))}, "names bucket 4, which the entry does not copy"},
		{"keys of another bucket", []*rspb.CopyTableSummary{cc.GetSummaries()[0], sum(3, true, k.bucketTuples(3), k.bucketTuples(5))}, "not a range of the bucket's"},
		{"buckets out of order", []*rspb.CopyTableSummary{cc.GetSummaries()[0], {Buckets: []*rspb.CopyTableBucket{
			{Bucket: 5, Tuples: true, First: k.bucketTuples(5), Last: k.bucketTuples(5)},
			{Bucket: 3, Tuples: true, First: k.bucketTuples(3), Last: k.bucketTuples(3)}}}}, "within or before the bucket before it"},
		{"tuples in a history", []*rspb.CopyTableSummary{{Buckets: []*rspb.CopyTableBucket{{Bucket: 3, First: k.event(3, 1), Last: k.event(3, 1), BySpace: map[uint32]uint64{1: 1}}}}, cc.GetSummaries()[1]}, "counts tuples in bucket 3's history"},
	} {
		bad := &rspb.CopyChunks{Chunks: cc.GetChunks(), Tables: cc.GetTables(), Summaries: c.sums}
		before := ingested(dst)
		for i, o := range dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: bad}})[0].Copies {
			if o.Refused == nil || !strings.Contains(o.Refused.Error(), c.why) {
				t.Fatalf("%s: chunk %d: %v, want it refused: %q", c.name, i, o.Refused, c.why)
			}
		}
		if ingested(dst) != before {
			t.Fatalf("%s: a table was ingested", c.name)
		}
	}
}

// A bucket given away and received back within one apply run (a member
// that catches up on many entries at once): the cleanup's range deletion
// of the bucket's rows is in the run's batch, committed after the copy's
// ingest, so an ingested table would be deleted by it. The copy's rows
// go through the batch instead, after the deletion: every member holds
// them, counted once.
func TestACopyAfterItsBucketsCleanupInOneRunKeepsItsRows(t *testing.T) {
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.setup()
	dst.tables = true
	for _, id := range []string{"a", "b"} {
		dst.ok(&rspb.Batch{Bucket: copyBucket, Ops: []*rspb.Op{insertOp(t, offer(1, id, 1))}})
	}
	for _, id := range []string{"a", "b", "c"} {
		src.ok(&rspb.Batch{Bucket: copyBucket, Ops: []*rspb.Op{insertOp(t, offer(1, id, 2))}})
	}
	step := func(state rspb.BucketState_State, gen uint64) *rspb.Command {
		return &rspb.Command{Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: []*rspb.SetBucket{{Bucket: copyBucket, State: state, Generation: gen, Peer: "src"}}}}}
	}
	before := ingested(dst)
	out := dst.apply(
		step(rspb.BucketState_STATE_SENDING, 2),
		step(rspb.BucketState_STATE_GARBAGE, 2),
		step(rspb.BucketState_STATE_RECEIVING, 3),
		&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: copyBucket, Generation: 3, Tuples: src.chunk(copyBucket), Last: true}}}}},
	)
	if o := out[3].Copies; len(o) != 1 || o[0].Refused != nil || o[0].Copied != 3 {
		t.Fatalf("copy = %+v, want 3 copied", o)
	}
	if got, want := rowsOf(t, dst, copyBucket), `"a"=2 "b"=2 "c"=2`; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	dst.verified("after the copy")
	if n := ingested(dst) - before; n != 0 {
		t.Fatalf("%d tables ingested under the run's deletion of the bucket, want none", n)
	}
}

// A key deleted earlier in the same apply run is absent when a restore's
// table comes (it inserts where no tuple is): the table's row must
// survive the batch's deletion, committed after the ingest, as it does on
// a member that applied the two entries in two runs.
func TestARestoreAfterADeleteInOneRunKeepsTheRow(t *testing.T) {
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.setup()
	dst.tables = true
	const b = 5
	for _, f := range []*fixture{src, dst} {
		f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
	}
	src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "b", 1))}})
	ka := key(t, tuple.Uint(1), tuple.String("a"))
	out := dst.apply(
		&rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: b, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: ka}}}}},
		&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: b, Restore: true, Tuples: src.chunk(b)}}}}},
	)
	if o := out[1].Copies; len(o) != 1 || o[0].Refused != nil || o[0].Copied != 2 {
		t.Fatalf("restore = %+v, want 2 copied (a, deleted just before, and b)", o)
	}
	if got, want := rowsOf(t, dst, b), `"a"=1 "b"=1`; got != want {
		t.Fatalf("rows %s, want %s", got, want)
	}
	dst.verified("after the restore")
}
