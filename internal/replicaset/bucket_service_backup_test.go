package replicaset

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// A backup's chunks, as chunkBucket reads them from one replicaset,
// restored into another that holds the bucket ACTIVE: the rows arrive,
// the record stays ACTIVE (not marked copied), the bucket's revision
// continues from the backed-up one, a retry of a write the source applied
// is answered, not applied again, and a repeated restore inserts nothing.
// A restore chunk is refused where the bucket is not ACTIVE, and a move's
// chunk is still refused where it is.
func TestABackupRestoresIntoAnActiveBucket(t *testing.T) {
	const b = 5
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.setup()
	id := requestID(1)
	src.ok(&rspb.Batch{Bucket: b, RequestId: id, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
	for i := range 3 {
		src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint("b", i), 1))}})
	}
	srcRev, err := src.sm.RevisionOf(src.db, b)
	if err != nil || srcRev != 4 {
		t.Fatalf("the source's revision: %d, %v; want 4", srcRev, err)
	}
	source := &Storage{sm: src.sm, cfg: StorageConfig{ReplicasetID: "r1", DB: src.db}}
	var chunks []*rspb.CopyChunk
	ch := &chunker{limit: 2, flush: func(part *rspb.SendBucketsResponse) error {
		chunks = append(chunks, part.GetChunks()...)
		return nil
	}}
	if err := source.chunkBucket(src.db, ch, &rspb.CopyChunk{Bucket: b, Restore: true}, src.sm.reqs.ofBuckets(map[uint32]bool{b: true})[b]); err != nil {
		t.Fatal(err)
	}
	if err := ch.send(); err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 || !chunks[len(chunks)-1].GetLast() || chunks[len(chunks)-1].GetRevision() != srcRev {
		t.Fatalf("the bucket in %d chunks (2 rows each), the last %v", len(chunks), chunks[len(chunks)-1])
	}
	restore := func(f *fixture) []*CopyOutcome {
		t.Helper()
		return f.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: chunks}}})[0].Copies
	}
	copied := 0
	for i, o := range restore(dst) {
		if o.Refused != nil {
			t.Fatalf("chunk %d refused: %v", i, o.Refused)
		}
		copied += o.Copied
	}
	if copied != 4 {
		t.Fatalf("the restore copied %d rows, want 4", copied)
	}
	if st, err := dst.sm.BucketStateOf(dst.db, b); err != nil || st.GetState() != rspb.BucketState_STATE_ACTIVE || st.GetCopied() {
		t.Fatalf("the record after the restore: %v, %v; want ACTIVE, not copied", st, err)
	}
	for i, o := range restore(dst) {
		if o.Refused != nil || o.Copied != 0 {
			t.Fatalf("a repeated restore's chunk %d: %+v, want nothing inserted", i, o)
		}
	}
	if o := dst.batch(&rspb.Batch{Bucket: b, RequestId: id, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}}); !o.Duplicate {
		t.Fatalf("a retry of the source's write after the restore: %+v, want its remembered answer", o)
	}
	if r := dst.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, "c", 1))}}); r.GetRevision() != srcRev+1 {
		t.Fatalf("the first write after the restore: revision %d, want %d", r.GetRevision(), srcRev+1)
	}
	k, _ := tuple.AppendKey(nil, tuple.Uint(1), tuple.String("b2"))
	if _, found, err := dst.sm.Get(dst.db, b, 1, k); err != nil || !found {
		t.Fatalf("a restored row: found %v, %v", found, err)
	}

	// Where the bucket is not ACTIVE, a restore is refused, naming it.
	dst.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "r2")
	if o := restore(dst)[0]; o.Refused == nil || !strings.Contains(o.Refused.Error(), "not active") {
		t.Fatalf("a restore into a SENDING bucket: %+v", o)
	}
	// And a move's chunk is refused where the bucket is ACTIVE.
	if o := dst.copyChunk(6, 1, chunks[0].GetTuples()...); o.Refused == nil || !strings.Contains(o.Refused.Error(), "not receiving") {
		t.Fatalf("a move's chunk into an ACTIVE bucket: %+v", o)
	}
}

// chunkChanges of one bucket since base: the chunks flushed, and whether
// it sent them (false: the caller sends the bucket whole).
func changesSince(t *testing.T, f *fixture, b uint32, base uint64) ([]*rspb.CopyChunk, bool) {
	t.Helper()
	s := &Storage{sm: f.sm, cfg: StorageConfig{ReplicasetID: "r1", DB: f.db}}
	var chunks []*rspb.CopyChunk
	ch := &chunker{limit: 2, flush: func(part *rspb.SendBucketsResponse) error {
		chunks = append(chunks, part.GetChunks()...)
		return nil
	}}
	sent, err := s.chunkChanges(f.db, ch, &rspb.CopyChunk{Bucket: b}, f.sm.reqs.ofBuckets(map[uint32]bool{b: true})[b], base)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.send(); err != nil {
		t.Fatal(err)
	}
	return chunks, sent
}

// An incremental backup's bucket, as the replicaset sends it since a
// base revision: unchanged (one last chunk, its revision), its changes
// (the keys written after the base with their tuples, those deleted, the
// history after the base, every chunk marked changes), or not at all
// (whole, the caller's) when its history does not reach back to the base
// or its revision is below the base's.
func TestBackupSendsABucketsChangesSinceItsBase(t *testing.T) {
	const b = 5
	f := newFixture(t)
	f.setup()
	for i := range 4 {
		f.ok(&rspb.Batch{Bucket: b, RequestId: requestID(byte(10 + i)), Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint("a", i), 1))}})
	}
	const base = 4
	if chunks, sent := changesSince(t, f, b, base); !sent || len(chunks) != 1 || !chunks[0].GetChanges() || !chunks[0].GetLast() ||
		chunks[0].GetRevision() != base || len(chunks[0].GetTuples())+len(chunks[0].GetEvents()) != 0 {
		t.Fatalf("unchanged since the base: sent %v, %v", sent, chunks)
	}
	f.ok(&rspb.Batch{Bucket: b, RequestId: requestID(20), Ops: []*rspb.Op{insertOp(t, offer(1, "a9", 1)), insertOp(t, offer(1, "a8", 1))}})
	f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: key(t, tuple.Uint(1), tuple.String("a1"))}}})
	chunks, sent := changesSince(t, f, b, base)
	if !sent {
		t.Fatal("changes since a base the history holds: not sent")
	}
	var written, deleted []string
	var events, requests []uint64 // the requests' revisions
	for i, c := range chunks {
		for _, r := range c.GetRequests() {
			res := &rspb.BatchResult{}
			if err := res.UnmarshalVT(r.GetResult()); err != nil {
				t.Fatalf("request id %x: its result: %v", r.GetId(), err)
			}
			requests = append(requests, res.GetRevision())
		}
		if !c.GetChanges() || c.GetLast() != (i == len(chunks)-1) {
			t.Fatalf("chunk %d of %d: changes %v, last %v", i, len(chunks), c.GetChanges(), c.GetLast())
		}
		for _, tp := range c.GetTuples() {
			written = append(written, string(tp.GetKey()))
		}
		for _, d := range c.GetDeleted() {
			deleted = append(deleted, string(d.GetKey()))
		}
		for _, v := range c.GetEvents() {
			ev := &rspb.Event{}
			if err := ev.UnmarshalVT(v); err != nil {
				t.Fatalf("an event: %v", err)
			}
			events = append(events, ev.GetRevision())
		}
	}
	k := func(id string) string { return string(key(t, tuple.Uint(1), tuple.String(id))) }
	if fmt.Sprint(written) != fmt.Sprint([]string{k("a8"), k("a9")}) || fmt.Sprint(deleted) != fmt.Sprint([]string{k("a1")}) ||
		fmt.Sprint(events) != "[5 6]" || chunks[len(chunks)-1].GetRevision() != 6 {
		t.Fatalf("changes since %d: written %q, deleted %q, events %v, revision %d", base, written, deleted, events, chunks[len(chunks)-1].GetRevision())
	}
	// Of the four ids remembered before the base and the one after, the
	// one after.
	if fmt.Sprint(requests) != "[5]" {
		t.Fatalf("changes since %d: request ids of revisions %v, want those after the base ([5])", base, requests)
	}
	if _, sent := changesSince(t, f, b, 7); sent {
		t.Fatal("a base above the bucket's revision (another cluster's): sent as changes")
	}
	// History trimmed past the base: the bucket goes whole.
	f.apply(&rspb.Command{Op: &rspb.Command_SetHistory{SetHistory: &rspb.SetHistory{Revisions: MinHistoryRevisions, Bytes: MinHistoryBytes}}})
	for i := range MinHistoryRevisions + eventTrimSlack + 1 {
		f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(2, fmt.Sprint("h", i), 1))}})
	}
	if oldest, err := f.sm.OldestEvent(f.db, b); err != nil || oldest <= base {
		t.Fatalf("the history was not trimmed past %d: its oldest revision %d, %v", base, oldest, err)
	}
	if _, sent := changesSince(t, f, b, base); sent {
		t.Fatal("a base the history no longer reaches: sent as changes")
	}
}
