package replicaset

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// The batched forms of the move steps: the mover moves many buckets
// between the same two replicasets at once, and every step of theirs is
// one log entry (SetBuckets, CopyChunks) and one RPC for all of them. Each
// bucket's step is applied and answered on its own, exactly as the
// single-bucket step would be: a refused bucket does not stop the others.

// MaxBatchBuckets bounds the buckets of one SetBuckets, ReceiveBuckets or
// SendBuckets call.
const MaxBatchBuckets = 4096

// CopyTableTuples bounds the tuples of one copy entry whose tuples go as
// tables (CopyChunks.tables), besides MaxChunkBytes: a table costs every
// member a file's create, write and sync, 0.3–0.5 ms of CPU on this
// project's machines whatever its size, so an entry holds as many as a
// raft message does (MaxChunkBytes of ~130-byte rows), where the tuple
// path's entries hold CopyChunkTuples.
const CopyTableTuples = 8192

// CopyPipeline is how many entries of copied chunks a ReceiveBuckets has
// proposed and not yet applied at most, while its stream goes on.
const CopyPipeline = 4

func checkBatch(n int) error {
	if n == 0 {
		return status.Error(codes.InvalidArgument, "no buckets named")
	}
	if n > MaxBatchBuckets {
		return status.Errorf(codes.InvalidArgument, "%d buckets in one call; at most %d", n, MaxBatchBuckets)
	}
	return nil
}

// SetBuckets implements BucketService.
func (b *BucketService) SetBuckets(ctx context.Context, req *rspb.SetBucketsRequest) (*rspb.SetBucketsResponse, error) {
	if err := checkBatch(len(req.GetSteps())); err != nil {
		return nil, err
	}
	s, err := b.leader(req.GetReplicasetId(), req.GetSteps()[0].GetBucket())
	if err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: req.GetSteps()}}})
	if err != nil {
		return nil, err
	}
	outs := res.Steps
	if len(outs) != len(req.GetSteps()) {
		return nil, status.Errorf(codes.Internal, "replicaset: %d outcomes of a batch of %d bucket steps", len(outs), len(req.GetSteps()))
	}
	resp := &rspb.SetBucketsResponse{Results: make([]*rspb.SetBucketResult, len(outs))}
	for i, o := range outs {
		r := &rspb.SetBucketResult{}
		switch {
		case o == nil:
			r.Refused = "not applied"
		case o.Refused != nil:
			r.Refused, r.Record = o.Refused.Error(), o.Record
		default:
			r.Changed, r.Record, r.DeletedBySpace = o.Changed, o.Record, o.Deleted
			if o.Changed {
				s.log.Debug("bucket state", "bucket", req.GetSteps()[i].GetBucket(), "record", describeRecord(o.Record))
			}
		}
		resp.Results[i] = r
	}
	return resp, nil
}

// ReceiveBuckets implements BucketService: the destination's leader pulls
// the buckets from the source's leader over one stream, and logs the
// chunks of several buckets per entry.
func (b *BucketService) ReceiveBuckets(ctx context.Context, req *rspb.ReceiveBucketsRequest) (*rspb.ReceiveBucketsResponse, error) {
	if err := checkBatch(len(req.GetBuckets())); err != nil {
		return nil, err
	}
	s, err := b.leader(req.GetReplicasetId(), req.GetBuckets()[0].GetBucket())
	if err != nil {
		return nil, err
	}
	n := len(req.GetBuckets())
	if _, limit := s.quotas(); !s.receiving.take(n, limit) {
		return nil, status.Errorf(codes.ResourceExhausted, "replicaset %s cannot receive %d more buckets now: its quota is %d at once; retry", s.cfg.ReplicasetID, n, limit)
	}
	defer s.receiving.give(n)

	resp := &rspb.ReceiveBucketsResponse{Results: make([]*rspb.BucketReceived, n)}
	index := map[uint32]int{} // bucket -> its result, for the buckets to copy
	var want []*rspb.BucketGeneration
	for i, bg := range req.GetBuckets() {
		r := &rspb.BucketReceived{Bucket: bg.GetBucket(), CopiedBySpace: map[uint32]uint64{}}
		resp.Results[i] = r
		st, err := s.sm.BucketStateOf(s.cfg.DB, bg.GetBucket())
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		switch {
		case st.GetState() == rspb.BucketState_STATE_ACTIVE && st.GetGeneration() == bg.GetGeneration():
			// Copied and activated at this generation: a repeated step.
		case st.GetState() != rspb.BucketState_STATE_RECEIVING || st.GetGeneration() != bg.GetGeneration():
			r.Refused = fmt.Sprintf("bucket %d is %s on %s, not receiving at generation %d", bg.GetBucket(), describeRecord(st), s.cfg.ReplicasetID, bg.GetGeneration())
		case st.GetCopied():
			// Copied already (a repeated step).
		default:
			if _, dup := index[bg.GetBucket()]; dup {
				return nil, status.Errorf(codes.InvalidArgument, "bucket %d is named twice", bg.GetBucket())
			}
			index[bg.GetBucket()] = i
			want = append(want, bg)
		}
	}
	if len(want) == 0 {
		resp.Window = s.copyPace.receiveWindow()
		return resp, nil
	}
	// The destination must know every space the source may send.
	if _, err := s.ensureSchema(ctx, 0); err != nil {
		v, _ := s.cfg.GroupZero.Schema()
		if _, err := s.ensureSchema(ctx, v); err != nil {
			return nil, err
		}
	}
	var (
		mu sync.Mutex
		// finished: copied whole (its last chunk applied) or refused; not
		// asked for again when the stream is retried.
		finished = map[uint32]bool{}
		failed   error // the first failed chunk entry
		// copiedBytes: what the copy's entries took, for the pace's
		// bucket size (receiveWindow).
		copiedBytes int64
	)
	// apply logs chunks as one entry and records their outcomes.
	apply := func(ctx context.Context, cc *rspb.CopyChunks) error {
		res, err := s.proposeCopy(ctx, cc)
		if err != nil {
			return err
		}
		chunks, outs := cc.GetChunks(), res.Copies
		if len(outs) != len(chunks) {
			return status.Errorf(codes.Internal, "replicaset: %d outcomes of a copy of %d chunks", len(outs), len(chunks))
		}
		mu.Lock()
		defer mu.Unlock()
		for j, o := range outs {
			c := chunks[j]
			r := resp.Results[index[c.GetBucket()]]
			switch {
			case o == nil:
				return status.Error(codes.Internal, "replicaset: a copy chunk was not applied")
			case o.Refused != nil:
				r.Refused = o.Refused.Error()
				finished[c.GetBucket()] = true
				continue
			}
			r.Sent += uint64(o.Sent)
			r.Copied += uint64(o.Copied)
			for sp, k := range o.BySpace {
				r.CopiedBySpace[sp] += k
			}
			if c.GetLast() {
				finished[c.GetBucket()] = true
			}
		}
		return nil
	}
	err = s.onLeaderOf(ctx, req.GetFrom(), func(ctx context.Context, c rspb.BucketServiceClient) error {
		var ask []*rspb.BucketGeneration
		for _, bg := range want {
			if !finished[bg.GetBucket()] {
				ask = append(ask, bg)
			}
		}
		if len(ask) == 0 {
			return nil
		}
		// A leader that copies tables asks the source to write them
		// (docs/design/moves.md, "The copy as files").
		sreq := &rspb.SendBucketsRequest{ReplicasetId: req.GetFrom(), Buckets: ask, SortedRequests: true}
		if s.cfg.CopyTables {
			sreq.TableGroup, sreq.ChunkTuples = uint64(s.sm.group), CopyTableTuples
		}
		stream, err := c.SendBuckets(ctx, sreq)
		if err != nil {
			return err
		}
		// The chunks' entries are proposed while the stream goes on, up to
		// CopyPipeline at once. A bucket is marked copied (its last chunk,
		// without tuples) only in an entry proposed after every entry with
		// its tuples was applied, so "copied" always means every tuple is
		// here: entries proposed concurrently may be logged in any order,
		// one proposed after another was applied may not. The marks ride
		// on the next chunks' entry (or one entry at the end), so that a
		// bucket leaves its prev window (every write asking the source)
		// as soon as it is whole, not when the whole batch is.
		entryTuples := CopyChunkTuples
		if s.cfg.CopyTables {
			entryTuples = CopyTableTuples
		}
		var wg sync.WaitGroup
		slots := make(chan struct{}, CopyPipeline)
		var pending []*rspb.CopyChunk
		var pendingTables [][]byte // the source's tables of pending
		pendingSize := 0
		// Under mu: per bucket, the entries with its tuples proposed and
		// not yet applied; the marks of buckets whose last chunk arrived,
		// waiting for those entries; the marks free to go.
		inflight := map[uint32]int{}
		waiting := map[uint32]*rspb.CopyChunk{}
		var ready []*rspb.CopyChunk
		flush := func() {
			if len(pending) == 0 {
				return
			}
			chunks, tables, size := pending, pendingTables, pendingSize
			pending, pendingTables, pendingSize = nil, nil, 0
			cc, tableSize, err := s.checkedCopy(chunks, tables)
			if err != nil {
				mu.Lock()
				failed = cmp.Or(failed, err)
				mu.Unlock()
				return
			}
			size += tableSize
			copiedBytes += int64(size)
			if err := s.copyPace.wait(ctx, size); err != nil {
				mu.Lock()
				failed = cmp.Or(failed, err)
				mu.Unlock()
				return
			}
			slots <- struct{}{}
			mu.Lock()
			for _, c := range chunks {
				inflight[c.GetBucket()]++
			}
			if failed == nil { // after a failure no bucket is marked: the stream is asked again
				cc.Chunks = append(cc.Chunks, ready...) // marks of buckets whose tuples are all applied
				ready = nil
			}
			mu.Unlock()
			wg.Go(func() {
				defer func() { <-slots }()
				err := apply(ctx, cc)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = cmp.Or(failed, err)
					return // its buckets' marks wait for a retry of the stream
				}
				for _, c := range cc.GetChunks() {
					b := c.GetBucket()
					if c.GetLast() {
						continue // a mark
					}
					if inflight[b]--; inflight[b] == 0 && waiting[b] != nil {
						ready = append(ready, waiting[b])
						delete(waiting, b)
					}
				}
			})
		}
		settle := func() error {
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			err := failed
			failed = nil
			return err
		}
		for {
			got, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				// What was received and logged stays (a repeated copy
				// inserts nothing twice); the rest is asked again.
				flush()
				return cmp.Or(settle(), err)
			}
			mu.Lock()
			for _, rf := range got.GetRefused() {
				if i, ok := index[rf.GetBucket()]; ok {
					resp.Results[i].Refused = rf.GetReason()
					finished[rf.GetBucket()] = true
				}
			}
			mu.Unlock()
			// The source's tables hold the rows of this response's chunks:
			// they go in an entry of their own, with every chunk.
			tabled := len(got.GetTables()) > 0
			if tabled {
				flush()
				pendingTables = got.GetTables()
			}
			for _, ch := range got.GetChunks() {
				if _, ok := index[ch.GetBucket()]; !ok {
					continue // not asked for (a confused source): ignored
				}
				var mark *rspb.CopyChunk
				if ch.GetLast() {
					// The mark goes last, with the revision it sets; the
					// chunk's rows, request ids and history before it.
					mark = &rspb.CopyChunk{Bucket: ch.GetBucket(), Generation: ch.GetGeneration(), Last: true, Revision: ch.GetRevision()}
					ch.Last, ch.Revision = false, 0
				}
				if tabled || len(ch.GetTuples()) > 0 || len(ch.GetRequests()) > 0 || len(ch.GetEvents()) > 0 {
					pending = append(pending, ch)
					for _, t := range ch.GetTuples() {
						pendingSize += len(t.GetKey()) + len(t.GetTuple())
					}
					for _, r := range ch.GetRequests() {
						pendingSize += len(r.GetId()) + len(r.GetResult())
					}
					for _, e := range ch.GetEvents() {
						pendingSize += len(e)
					}
				}
				if mark != nil {
					mu.Lock()
					if inflight[mark.GetBucket()] == 0 && !slices.ContainsFunc(pending, func(c *rspb.CopyChunk) bool { return c.GetBucket() == mark.GetBucket() }) {
						ready = append(ready, mark)
					} else {
						waiting[mark.GetBucket()] = mark
					}
					mu.Unlock()
				}
				if !tabled && (pendingSize >= MaxChunkBytes || tupleCount(pending) >= entryTuples) {
					flush()
				}
			}
			if tabled {
				flush()
			}
		}
		flush()
		if err := settle(); err != nil {
			return err
		}
		// Every entry is applied now: the marks still held go in one.
		marks := ready
		for _, m := range waiting {
			marks = append(marks, m)
		}
		if len(marks) == 0 {
			return nil
		}
		return apply(ctx, &rspb.CopyChunks{Chunks: marks})
	})
	if err != nil {
		return nil, err
	}
	whole := 0
	for _, bg := range want {
		r := resp.Results[index[bg.GetBucket()]]
		if !finished[bg.GetBucket()] && r.GetRefused() == "" {
			r.Refused = "the source did not send it whole"
		}
		if r.GetRefused() == "" {
			whole++
		}
	}
	s.copyPace.copiedBuckets(copiedBytes, whole)
	resp.Window = s.copyPace.receiveWindow()
	return resp, nil
}

func tupleCount(chunks []*rspb.CopyChunk) int {
	n := 0
	for _, c := range chunks {
		n += len(c.GetTuples())
	}
	return n
}

// SendBuckets implements BucketService: each bucket's tuples, every space,
// from one consistent view, a bucket at a time; a bucket not being sent at
// the asked generation is refused on its own.
func (b *BucketService) SendBuckets(req *rspb.SendBucketsRequest, stream grpc.ServerStreamingServer[rspb.SendBucketsResponse]) error {
	if err := checkBatch(len(req.GetBuckets())); err != nil {
		return err
	}
	s, err := b.leader(req.GetReplicasetId(), req.GetBuckets()[0].GetBucket())
	if err != nil {
		return err
	}
	n := len(req.GetBuckets())
	if limit, _ := s.quotas(); !s.sending.take(n, limit) {
		return status.Errorf(codes.ResourceExhausted, "replicaset %s cannot send %d more buckets now: its quota is %d at once; retry", s.cfg.ReplicasetID, n, limit)
	}
	defer s.sending.give(n)
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	ch := &chunker{limit: int(req.GetChunkTuples()), blocks: req.GetSortedRequests(), flush: stream.Send}
	buckets := req.GetBuckets()
	if g := req.GetTableGroup(); g != 0 {
		// The rows go as tables keyed for the destination's group, the
		// buckets in order, so that each table's keys are.
		ch.tables = &sourceTables{dst: newKeys(g)}
		buckets = slices.SortedFunc(slices.Values(buckets), func(x, y *rspb.BucketGeneration) int { return cmp.Compare(x.GetBucket(), y.GetBucket()) })
	}
	// The buckets' remembered request ids, in one walk of the window.
	asked := map[uint32]bool{}
	for _, bg := range buckets {
		if asked[bg.GetBucket()] {
			return status.Errorf(codes.InvalidArgument, "bucket %d is named twice", bg.GetBucket())
		}
		asked[bg.GetBucket()] = true
	}
	remembered := s.sm.reqs.ofBuckets(asked)
	for _, bg := range buckets {
		bucket := bg.GetBucket()
		st, err := s.sm.BucketStateOf(snap, bucket)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if st.GetState() != rspb.BucketState_STATE_SENDING || st.GetGeneration() != bg.GetGeneration() {
			ch.refuse(bucket, fmt.Sprintf("bucket %d is %s on %s, not sending at generation %d", bucket, describeRecord(st), s.cfg.ReplicasetID, bg.GetGeneration()))
			continue
		}
		if err := s.chunkBucket(snap, ch, &rspb.CopyChunk{Bucket: bucket, Generation: bg.GetGeneration()}, remembered[bucket]); err != nil {
			return err
		}
	}
	return ch.send()
}

// chunker cuts a stream of buckets into chunks of at most limit tuples
// (0: CopyChunkTuples; with tables, CopyTableTuples) and about
// MaxChunkBytes, and hands each full part of the stream, with the buckets
// refused so far, to flush; with tables, the chunks' rows go in the
// part's tables.
type chunker struct {
	// blocks: a bucket's request ids of requestIDLen bytes go in
	// blocks (SortedRequests), not a message each.
	blocks      bool
	limit       int
	count, size int
	chunks      []*rspb.CopyChunk
	refused     []*rspb.BucketRefusal
	tables      *sourceTables
	flush       func(*rspb.SendBucketsResponse) error
}

// send flushes what the chunker holds, if anything.
func (c *chunker) send() error {
	if len(c.chunks) == 0 && len(c.refused) == 0 {
		return nil
	}
	part := &rspb.SendBucketsResponse{Chunks: c.chunks, Refused: c.refused}
	if c.tables != nil {
		var err error
		if part.Tables, err = c.tables.finish(); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	err := c.flush(part)
	if c.tables != nil {
		// flush (a stream's Send) encoded the part before it returned:
		// its tables' buffers are written into again.
		c.tables.reuse()
	}
	c.chunks, c.refused, c.count, c.size = nil, nil, 0, 0
	return err
}

// sourceTables are the tables of a part of a source's stream
// (SendBucketsResponse.tables): its buckets' history and their tuples,
// each as the destination keys them (dst). A history's table sorts before
// the tuples' (e/ before t/), and each is written in key order: the
// buckets go in order, each bucket's tuples and then its history.
type sourceTables struct {
	dst            keys
	events, tuples *copyTable
	key            []byte // a destination key being built
	// The buffers of the tables of the part being sent: a new buffer a
	// table, grown by doubling, was a third of a source's table writing,
	// so they come from and go back to sourceTableBuffers.
	sent []*memWritable
}

// sourceTableBuffers are the buffers of the tables of sources' parts
// sent, to write into again.
var sourceTableBuffers = sync.Pool{New: func() any { return &memWritable{} }}

// buffer is a buffer for a table.
func (t *sourceTables) buffer() *memWritable { return sourceTableBuffers.Get().(*memWritable) }

// reuse gives back the buffers of the tables finish returned: the part
// that held them has been sent.
func (t *sourceTables) reuse() {
	for _, b := range t.sent {
		sourceTableBuffers.Put(b)
	}
	t.sent = t.sent[:0]
}

// tuple writes the tuple of bucket b at the source's key k (under src's
// prefix), with its stored value v.
func (t *sourceTables) tuple(src keys, b uint32, k, v []byte) error {
	if t.tuples == nil {
		t.tuples = newCopyTableIn(t.buffer())
	}
	t.key = append(append(t.key[:0], t.dst.prefix...), k[len(src.prefix):]...)
	return t.tuples.set(t.dst, b, true, t.key, v)
}

// event writes an event of bucket b as stored, at its revision.
func (t *sourceTables) event(b uint32, v []byte) error {
	bucket, rev, err := eventStamp(v)
	switch {
	case err != nil:
		return fmt.Errorf("replicaset: bucket %d's stored event: %w", b, err)
	case bucket != b || rev == 0:
		return fmt.Errorf("replicaset: bucket %d's stored event is of bucket %d, revision %d", b, bucket, rev)
	}
	if t.events == nil {
		t.events = newCopyTableIn(t.buffer())
	}
	return t.events.set(t.dst, b, false, t.dst.event(b, rev), v)
}

// finish returns the tables written since the last finish, the history's
// first.
func (t *sourceTables) finish() ([][]byte, error) {
	var out [][]byte
	for _, ct := range []*copyTable{t.events, t.tuples} {
		if ct == nil {
			continue
		}
		sst, err := ct.finish()
		if err != nil {
			return nil, err
		}
		if sst != nil {
			out = append(out, sst)
		}
		t.sent = append(t.sent, ct.out)
	}
	t.events, t.tuples = nil, nil
	return out, nil
}

func (c *chunker) refuse(bucket uint32, reason string) {
	c.refused = append(c.refused, &rspb.BucketRefusal{Bucket: bucket, Reason: reason})
}

// chunkBucket streams one bucket from snap, in chunks shaped as first
// (its bucket, generation and restore flag): its tuples, every space,
// then its remembered request ids (rem, what the window holds of the
// bucket), then its change history; the last
// chunk carries its revision and has last set.
func (s *Storage) chunkBucket(snap pebble.Reader, ch *chunker, first *rspb.CopyChunk, rem remembered) error {
	bucket := first.GetBucket()
	bc := ch.bucket(first)
	var err error
	if ch.tables != nil {
		err = s.eachTupleRow(snap, bucket, func(k, v []byte) error {
			if err := ch.tables.tuple(s.sm.k, bucket, k, v); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
			return bc.added(len(k)+len(v), true)
		})
	} else {
		err = s.eachTuple(snap, bucket, func(t *rspb.CopiedTuple, n int) error {
			bc.chunk.Tuples = append(bc.chunk.Tuples, t)
			return bc.added(n, true)
		})
	}
	if err != nil {
		return err
	}
	rev, err := s.sm.RevisionOf(snap, bucket)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	// The bucket's remembered request ids go with it, so that a retry
	// of a write applied here is answered there too.
	if err := s.chunkRequests(snap, bc, rem, rev, 0); err != nil {
		return err
	}
	// And its change history, for watchers behind it.
	var evErr error
	_, err = s.sm.EventBytes(snap, bucket, 0, func(v []byte) bool {
		// As stored: the destination's leader checks it (checkedCopy).
		if ch.tables != nil {
			evErr = ch.tables.event(bucket, v)
		} else {
			bc.chunk.Events = append(bc.chunk.Events, bytes.Clone(v))
		}
		if evErr == nil {
			evErr = bc.added(len(v), false)
		}
		return evErr == nil
	})
	if evErr != nil {
		return evErr
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	bc.chunk.Revision = rev
	bc.chunk.Last = true // this bucket is whole
	return nil
}

// bucketChunks cuts one bucket's part of a chunker's stream into chunks
// shaped as its first (its bucket, generation, restore and changes): the
// chunk being filled is chunk.
type bucketChunks struct {
	ch           *chunker
	first, chunk *rspb.CopyChunk
	limit        int // tuples a response holds at most
}

// bucket begins a bucket's chunks with first.
func (c *chunker) bucket(first *rspb.CopyChunk) *bucketChunks {
	limit, most := c.limit, CopyChunkTuples
	if c.tables != nil {
		most = CopyTableTuples
	}
	if limit <= 0 || limit > most {
		limit = most
	}
	c.chunks = append(c.chunks, first)
	return &bucketChunks{ch: c, first: first, chunk: first, limit: limit}
}

// added accounts for n more bytes in the chunk (a tuple's, or a deleted
// key's, when tuple); a full response is sent, and the bucket goes on in
// a new chunk.
func (b *bucketChunks) added(n int, tuple bool) error {
	ch := b.ch
	ch.size += n
	if tuple {
		ch.count++
	}
	if ch.count < b.limit && ch.size < MaxChunkBytes {
		return nil
	}
	if err := ch.send(); err != nil {
		return err
	}
	f := b.first
	b.chunk = &rspb.CopyChunk{Bucket: f.GetBucket(), Generation: f.GetGeneration(), Restore: f.GetRestore(), Changes: f.GetChanges()}
	ch.chunks = append(ch.chunks, b.chunk)
	return nil
}

// chunkRequests adds a bucket's remembered request ids (rem) to its
// chunks, with their results as stored, those whose batch made a
// revision above after (0: all); upTo is the bucket's revision in snap
// (eachRequest). Each goes once, in id order: those of requestIDLen bytes
// in a block a chunk where the chunker sends blocks, else, and the others
// always, one message an id.
func (s *Storage) chunkRequests(snap pebble.Reader, bc *bucketChunks, rem remembered, upTo, after uint64) error {
	n := len(rem.ids)
	for _, r := range rem.copied {
		n += r.block.len()
	}
	sorted := make([]copiedRequest, 0, n)
	err := s.eachRequest(snap, rem, upTo, after, func(id, result []byte) error {
		if len(id) == requestIDLen {
			sorted = append(sorted, newCopiedRequest(id, result))
			return nil
		}
		bc.chunk.Requests = append(bc.chunk.Requests, &rspb.CopiedRequest{Id: id, Result: result})
		return bc.added(len(id)+len(result), false)
	})
	if err != nil {
		return err
	}
	sorted = sortedRequests(sorted)
	for i, r := range sorted {
		if !bc.ch.blocks {
			bc.chunk.Requests = append(bc.chunk.Requests, &rspb.CopiedRequest{Id: r.id, Result: r.result})
			if err := bc.added(len(r.id)+len(r.result), false); err != nil {
				return err
			}
			continue
		}
		if bc.chunk.SortedRequests == nil {
			bc.chunk.SortedRequests = newSortedRequests(sorted[i:], MaxChunkBytes)
		}
		appendRequest(bc.chunk.SortedRequests, r.id, r.result)
		if err := bc.added(len(r.id)+len(r.result)+4, false); err != nil {
			return err
		}
	}
	return nil
}

// eachRequest calls fn with each of a bucket's remembered request ids
// (requestWindow.ofBuckets) whose batch made a revision above after (0:
// all), and its result as stored; upTo is the bucket's revision in snap.
// A result the window kept is taken from there if its batch's revision is
// at most upTo (so its write is in snap, and the id too unless forgotten,
// which the window did first). The others are read from snap, after the
// kept ones: their keys by one iterator seeking forward in key order (a
// Get each costs 8 µs an id), then the records of the copies that brought
// the ids without a key (requestRecord); an id in neither was forgotten in
// snap and is skipped. Then the ids of the blocks copies brought, each
// block's results from the window or else from its record in snap (a
// block not in snap is skipped: forgotten, or copied after snap). Every
// result is sent as stored: the destination's leader checks it
// (checkedCopy).
func (s *Storage) eachRequest(snap pebble.Reader, rem remembered, upTo, after uint64, fn func(id, result []byte) error) error {
	if err := s.eachWindowRequest(snap, rem.ids, upTo, after, fn); err != nil {
		return err
	}
	for _, r := range rem.copied {
		blk, err := s.sm.heldBlock(snap, r)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		for i := range blk.len() {
			res := blk.result(i)
			if after > 0 {
				if _, rev, err := resultStamp(res); err != nil || rev <= after {
					continue // checked when copied: err is never set
				}
			}
			if err := fn(blk.id(i), res); err != nil {
				return err
			}
		}
	}
	return nil
}

// eachWindowRequest is eachRequest's part for the window's own ids.
func (s *Storage) eachWindowRequest(snap pebble.Reader, all []rememberedID, upTo, after uint64, fn func(id, result []byte) error) error {
	ids := all
	if after > 0 {
		ids = nil
		for _, r := range all {
			// An id whose batch made a revision at or below after was
			// remembered before it (the window knows each id's revision:
			// the others are not read).
			if r.rev == 0 || r.rev > after {
				ids = append(ids, r)
			}
		}
	}
	var keys [][]byte
	var order []int // ids[order[k]] is the id of keys[k]
	for i, r := range ids {
		if r.result != nil && r.rev != 0 && r.rev <= upTo {
			if err := fn(r.id, r.result); err != nil {
				return err
			}
			continue
		}
		keys = append(keys, s.sm.k.requestID(r.ms, r.id))
		order = append(order, i)
	}
	if len(order) == 0 {
		return nil
	}
	byKey := make([]int, len(order))
	for i := range byKey {
		byKey[i] = i
	}
	slices.SortFunc(byKey, func(x, y int) int { return bytes.Compare(keys[x], keys[y]) })
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: keys[byKey[0]], UpperBound: append(bytes.Clone(keys[byKey[len(byKey)-1]]), 0)})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer it.Close()
	missed := map[int64]map[string]bool{} // by time: ids with no key of their own
	for _, k := range byKey {
		i := order[k]
		if !it.SeekGE(keys[k]) || !bytes.Equal(it.Key(), keys[k]) {
			if err := it.Error(); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
			if missed[ids[i].ms] == nil {
				missed[ids[i].ms] = map[string]bool{}
			}
			missed[ids[i].ms][string(ids[i].id)] = true
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := fn(ids[i].id, bytes.Clone(v)); err != nil {
			return err
		}
	}
	// The ids a copy brought are in its records: one read for all those
	// of a time.
	for _, ms := range slices.Sorted(maps.Keys(missed)) {
		var ferr error
		err := s.sm.eachRequestRecordAt(snap, ms, func(c *rspb.CopyChunk) bool {
			for _, q := range c.GetRequests() {
				if missed[ms][string(q.GetId())] {
					delete(missed[ms], string(q.GetId()))
					if ferr = fn(q.GetId(), q.GetResult()); ferr != nil {
						return false
					}
				}
			}
			return len(missed[ms]) > 0
		})
		if ferr != nil {
			return ferr
		}
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	return nil
}
