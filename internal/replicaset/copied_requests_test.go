package replicaset

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// blockParts is the chunks of bucket b that src sends (chunkBucket), in
// parts of up to limit tuples, its ids in blocks where blocks.
func blockParts(t *testing.T, src *fixture, b uint32, gen uint64, limit int, blocks bool) []*rspb.CopyChunk {
	t.Helper()
	source := &Storage{sm: src.sm, cfg: StorageConfig{ReplicasetID: "src", DB: src.db}}
	var chunks []*rspb.CopyChunk
	ch := &chunker{limit: limit, blocks: blocks, flush: func(part *rspb.SendBucketsResponse) error {
		chunks = append(chunks, part.GetChunks()...)
		return nil
	}}
	if err := source.chunkBucket(src.db, ch, &rspb.CopyChunk{Bucket: b, Generation: gen}, src.sm.reqs.ofBuckets(map[uint32]bool{b: true})[b]); err != nil {
		t.Fatal(err)
	}
	if err := ch.send(); err != nil {
		t.Fatal(err)
	}
	return chunks
}

// blocksOf is the ids of the chunks' blocks, with their results.
func blocksOf(chunks []*rspb.CopyChunk) map[string][]byte {
	out := map[string][]byte{}
	for _, c := range chunks {
		blk := blockOf(c.GetSortedRequests())
		for i := range blk.len() {
			out[string(blk.id(i))] = blk.result(i)
		}
	}
	return out
}

// A bucket's request ids of 16 bytes go with its copy as blocks in id
// order, which the destination stores and holds as they came: a retry of
// any of them there is answered with the source's result, across a
// restart too, only for its bucket; the destination sends them on once
// each, with the ids it learned itself, from its window or its database
// alike; and they leave with the window's time slot. An id of another
// length goes one message an id, as before.
func TestRequestIDBlocksMoveWithTheirBucket(t *testing.T) {
	const b, n = 5, 40
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	rng := rand.New(rand.NewPCG(1, 2))
	write := func(id []byte, i int) *rspb.Batch {
		return &rspb.Batch{RequestId: id, Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, string(rune('a'+i%26))+strings.Repeat("x", i/26), float64(i)))}}
	}
	results := map[string]*rspb.BatchResult{}
	var ids [][]byte
	for i := range n {
		id := make([]byte, requestIDLen)
		for j := range id {
			id[j] = byte(rng.Uint32())
		}
		ids = append(ids, id)
		results[string(id)] = src.ok(write(id, i))
	}
	odd := []byte("an-odd-id")
	src.ok(write(odd, n))
	if o := src.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "r2"); !o.Changed {
		t.Fatalf("SENDING: %+v", o)
	}
	if o := dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "r1"); !o.Changed {
		t.Fatalf("RECEIVING: %+v", o)
	}

	chunks := blockParts(t, src, b, 2, 8, true)
	sent := blocksOf(chunks)
	var asMessages int
	for _, c := range chunks {
		for _, r := range c.GetRequests() {
			if !bytes.Equal(r.GetId(), odd) {
				t.Fatalf("request id %x went as a message of its own, not in a block", r.GetId())
			}
			asMessages++
		}
		if err := blockOf(c.GetSortedRequests()).check(b); err != nil {
			t.Fatalf("a block the source sent: %v", err)
		}
	}
	if len(sent) != n || asMessages != 1 {
		t.Fatalf("the source sent %d ids in blocks and %d as messages, want %d and 1", len(sent), asMessages, n)
	}
	if err := checkCopied(chunks, true); err != nil {
		t.Fatalf("the leader's check: %v", err)
	}
	// No room for the answers: a retry reads them from the block's record.
	dst.sm.reqs.keepLimit = 0
	dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: chunks}}})
	if rs := dst.sm.reqs.copiedBy[b]; len(rs) != 1 || rs[0].block.results != nil {
		t.Fatalf("the window holds %d blocks of the bucket, want 1 without its answers", len(rs))
	}
	if o := dst.setBucket(b, rspb.BucketState_STATE_ACTIVE, 2, ""); !o.Changed {
		t.Fatalf("ACTIVE: %+v", o)
	}
	if got := dst.storedRequestIDs(); got != n+1 {
		t.Fatalf("the destination stores %d request ids, want %d", got, n+1)
	}
	retried := func(when string) {
		t.Helper()
		for _, id := range append(ids[:n:n], odd) {
			o := dst.batch(write(id, 0))
			if want := results[string(id)]; !o.Duplicate || want != nil && o.Result.GetIndex() != want.GetIndex() {
				t.Fatalf("%s: a retry of request id %x: %+v, want the source's answer (index %d) as a duplicate", when, id, o, want.GetIndex())
			}
		}
		if _, ok := dst.sm.reqs.lookup(b+1, ids[0], 0); ok {
			t.Fatalf("%s: a copied id was found for another bucket than its own", when)
		}
		if !dst.sm.reqs.has(b, ids[0]) || dst.sm.reqs.has(b+1, ids[0]) {
			t.Fatalf("%s: has(bucket %d) %v, has(bucket %d) %v; want true, false", when, b, dst.sm.reqs.has(b, ids[0]), b+1, dst.sm.reqs.has(b+1, ids[0]))
		}
	}
	retried("after the copy, the answers read from the record")
	dst.reopen()
	if rs := dst.sm.reqs.copiedBy[b]; len(rs) != 1 || rs[0].block.results == nil {
		t.Fatalf("after a restart the window holds %d blocks of the bucket, want 1 with its answers", len(rs))
	}
	retried("after a restart, the answers kept")

	// Onward: once each, though the destination's window has one of them
	// too (answered on it, from the source's answer).
	onward := &Storage{sm: dst.sm, cfg: StorageConfig{ReplicasetID: "r2", DB: dst.db}}
	dst.sm.reqs.add(ids[3], requestStamp{ms: dst.now, bucket: b, rev: results[string(ids[3])].GetRevision()}, sent[string(ids[3])])
	rem := dst.sm.reqs.ofBuckets(map[uint32]bool{b: true})[b]
	if len(rem.copied) == 0 {
		t.Fatal("the destination's window holds no block of the bucket")
	}
	again := func(rem remembered) map[string][]byte {
		t.Helper()
		bc := (&chunker{blocks: true, flush: func(*rspb.SendBucketsResponse) error { return nil }}).bucket(&rspb.CopyChunk{Bucket: b})
		if err := onward.chunkRequests(dst.db, bc, rem, math.MaxUint64, 0); err != nil {
			t.Fatal(err)
		}
		if err := blockOf(bc.chunk.GetSortedRequests()).check(b); err != nil {
			t.Fatalf("the block sent on: %v", err)
		}
		return blocksOf([]*rspb.CopyChunk{bc.chunk})
	}
	same := func(what string, got map[string][]byte) {
		t.Helper()
		if len(got) != len(sent) {
			t.Fatalf("%s: %d ids, the source sent %d", what, len(got), len(sent))
		}
		for id, v := range sent {
			if !bytes.Equal(got[id], v) {
				t.Fatalf("%s: request id %x's result %x, the source's %x", what, id, got[id], v)
			}
		}
	}
	same("sent on from the window", again(rem))
	notKept := remembered{ids: rem.ids}
	for _, r := range rem.copied {
		c := *r
		c.block.results, c.block.ends = nil, nil
		notKept.copied = append(notKept.copied, &c)
	}
	same("sent on from the database", again(notKept))
	bc := (&chunker{flush: func(*rspb.SendBucketsResponse) error { return nil }}).bucket(&rspb.CopyChunk{Bucket: b})
	if err := onward.chunkRequests(dst.db, bc, rem, math.MaxUint64, 0); err != nil {
		t.Fatal(err)
	}
	if asMessages = len(bc.chunk.GetRequests()); asMessages != n+1 || bc.chunk.GetSortedRequests() != nil {
		t.Fatalf("to a destination that takes no blocks the ids go as %d messages, want %d", asMessages, n+1)
	}

	// Gone a slot after the window.
	dst.now += RequestIDWindow.Milliseconds() + 2*dst.sm.requestSlot()
	dst.apply(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 1}}})
	if got := dst.storedRequestIDs(); got != 0 {
		t.Fatalf("%d request ids stored after the window, want none", got)
	}
	if dst.sm.reqs.has(b, ids[0]) || len(dst.sm.reqs.copied) != 0 || len(dst.sm.reqs.copiedBy) != 0 {
		t.Fatalf("the window still holds the copied blocks after it: %d", len(dst.sm.reqs.copied))
	}
}

// A block of request ids is kept in the window while it has room for its
// results, and read from its record otherwise; its bytes are counted and
// let go of with it.
func TestRequestIDBlocksKeepTheirResultsWithinTheLimit(t *testing.T) {
	w := requestWindow{keepLimit: 100}
	block := func(ms int64, bucket uint32, results int) *copiedRecord {
		s := &rspb.SortedRequests{}
		appendRequest(s, requestID(byte(ms)), bytes.Repeat([]byte{1}, results))
		return &copiedRecord{ms: ms, bucket: bucket, block: blockOf(s)}
	}
	a, big, c := block(1, 1, 40), block(2, 2, 80), block(3, 1, 40)
	for _, r := range []*copiedRecord{a, big, c} {
		w.addRecord(r)
	}
	if a.block.results == nil || big.block.results != nil || c.block.results == nil || w.kept != 2*44 {
		t.Fatalf("kept: %v %v %v, %d bytes; want the first and the third, 88 bytes", a.block.results != nil, big.block.results != nil, c.block.results != nil, w.kept)
	}
	if _, ok := w.lookup(2, requestID(2), 0); !ok {
		t.Fatal("a block whose results were not kept is not found")
	}
	w.forget(2)
	if _, ok := w.lookup(1, requestID(1), 0); ok || w.kept != 44 || len(w.copiedBy[1]) != 1 || len(w.copied) != 2 {
		t.Fatalf("after the first left: found %v, %d bytes kept, %d blocks of bucket 1, %d in all", ok, w.kept, len(w.copiedBy[1]), len(w.copied))
	}
	w.forget(4)
	if w.kept != 0 || len(w.copied) != 0 || len(w.copiedBy) != 0 {
		t.Fatalf("after all left: %d bytes kept, %d blocks", w.kept, len(w.copied))
	}
}

// The destination's leader refuses a block that is not whole, not in
// order, or whose results are not its bucket's, naming what is wrong; a
// member refuses one whose blocks do not fit each other, and remembers
// none of its ids.
func TestRequestIDBlocksAreChecked(t *testing.T) {
	const b = 5
	res := func(bucket uint32) []byte {
		v, err := (&rspb.BatchResult{Bucket: bucket, Revision: 3}).MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	good := func() *rspb.SortedRequests {
		s := &rspb.SortedRequests{}
		appendRequest(s, requestID(1), res(b))
		appendRequest(s, requestID(2), res(b))
		return s
	}
	cases := []struct {
		name               string
		change             func(s *rspb.SortedRequests)
		atLeader, atMember string
	}{
		{"an id cut short", func(s *rspb.SortedRequests) { s.Ids = s.Ids[:31] }, "not a multiple of 16", "not a multiple of 16"},
		{"an end missing", func(s *rspb.SortedRequests) { s.Ends = s.Ends[:4] }, "4 an id", "4 an id"},
		{"results past the last end", func(s *rspb.SortedRequests) { s.Results = append(s.Results, 0) }, "its last result ends at", "its last result ends at"},
		{"ids out of order", func(s *rspb.SortedRequests) { copy(s.Ids[16:], requestID(0)) }, "not in ascending order", ""},
		{"an id twice", func(s *rspb.SortedRequests) { copy(s.Ids[16:], requestID(1)) }, "not in ascending order", ""},
		{"an empty result", func(s *rspb.SortedRequests) { binary.LittleEndian.PutUint32(s.Ends, 0) }, "or empty", ""},
		{"a result of another bucket", func(s *rspb.SortedRequests) {
			s.Results, s.Ends = nil, nil
			for _, v := range [][]byte{res(b), res(b + 1)} {
				s.Results = append(s.Results, v...)
				s.Ends = binary.LittleEndian.AppendUint32(s.Ends, uint32(len(s.Results)))
			}
		}, "is of bucket 6", ""},
		{"a result that is no BatchResult", func(s *rspb.SortedRequests) { s.Results[0] = 0xff }, "is not a BatchResult", ""},
	}
	for _, tc := range cases {
		s := good()
		tc.change(s)
		chunk := &rspb.CopyChunk{Bucket: b, Generation: 2, SortedRequests: s}
		err := checkCopied([]*rspb.CopyChunk{chunk}, true)
		if err == nil || !strings.Contains(err.Error(), tc.atLeader) || !strings.Contains(err.Error(), "bucket 5") {
			t.Fatalf("%s: the leader's check: %v, want it to name bucket 5 and %q", tc.name, err, tc.atLeader)
		}
		if tc.atMember == "" {
			continue
		}
		fresh := newFixture(t)
		fresh.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
		if o := fresh.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "r1"); !o.Changed {
			t.Fatalf("RECEIVING: %+v", o)
		}
		out := fresh.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{proto.CloneOf(chunk)}}}})[0].Copies
		if len(out) != 1 || out[0].Refused == nil || !strings.Contains(out[0].Refused.Error(), tc.atMember) {
			t.Fatalf("%s: apply: %+v, want the chunk refused: %q", tc.name, out, tc.atMember)
		}
		if fresh.sm.reqs.has(b, requestID(1)) || fresh.storedRequestIDs() != 0 {
			t.Fatalf("%s: the refused block's ids are remembered", tc.name)
		}
	}
}

// FuzzRequestBlock holds a block's reading to its check: a block the
// leader's check takes finds each of its ids where it is, with a result
// that decodes; any block whose framing a member takes reads without
// failing.
func FuzzRequestBlock(f *testing.F) {
	s := &rspb.SortedRequests{}
	for i := range 3 {
		v, _ := (&rspb.BatchResult{Bucket: 5, Revision: uint64(i + 1)}).MarshalVT()
		appendRequest(s, requestID(byte(i)), v)
	}
	f.Add(s.GetIds(), s.GetResults(), s.GetEnds())
	f.Add([]byte{}, []byte{}, []byte{})
	f.Add(s.GetIds()[:16], s.GetResults(), s.GetEnds()[:4])
	f.Fuzz(func(t *testing.T, ids, results, ends []byte) {
		blk := requestBlock{ids: ids, results: results, ends: ends}
		if blk.framing() != nil {
			return
		}
		for i := range blk.len() {
			_ = blk.result(i)
			if _, ok := blk.find(blk.id(i)); !ok && blk.check(5) == nil {
				t.Fatalf("a checked block does not find its id %d", i)
			}
		}
		if blk.check(5) != nil {
			return
		}
		for i := range blk.len() {
			at, ok := blk.find(blk.id(i))
			if !ok || at != i {
				t.Fatalf("id %d found at %d, %v", i, at, ok)
			}
			r := &rspb.BatchResult{}
			if err := r.UnmarshalVT(blk.result(i)); err != nil || len(blk.result(i)) == 0 || r.GetBucket() != 5 {
				t.Fatalf("id %d's result %x: %v", i, blk.result(i), err)
			}
		}
		if _, ok := blk.find(make([]byte, 3)); ok {
			t.Fatal("an id of 3 bytes was found")
		}
	})
}
