package replicaset

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/planetscale/vtprotobuf/protohelpers"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// What the state machine keeps in memory beside its data, so that applying
// a write reads from Pebble only the tuples it changes: the bucket records,
// the per-bucket tuple counts and the request ids within RequestIDWindow.
// All of it is a function of the database (load builds it from there at
// open, after a snapshot is restored and after a batch was dropped), and
// Apply changes it together with the writes it puts in the apply batch, so
// every member that applied the same log holds the same.
//
// The applier's view runs ahead of the database while a batch is being
// applied; readers see the bucket records as committed (the engine calls
// ApplyDone once the batch is committed, or dropped).

// requestWindow holds the request ids written within the window, with the
// leader-stamped time (ms) of their write and its bucket. Ids of
// requestIDLen bytes (every id the data service takes) are keyed by value,
// without a string each; ids of any other length (none are proposed
// today) by string, in a queue of their own.
//
// The apply loop changes it (under mu) and looks ids up (without: it is
// the only writer); other goroutines ask has, find and ofBuckets, under mu.
// Like the bucket records it runs ahead of the database while a batch is
// applied, never behind what readers see committed.
//
// It keeps each id's result as stored, too, up to RequestResultsKept bytes
// of them: a bucket's copy then sends its ids' results without reading
// them (a point read each, the ids being stored by time: 6 µs an id, the
// largest cost of a copied tuple; docs/benchmarks.md, "Request results
// kept in memory").
type requestWindow struct {
	mu    sync.RWMutex
	at    map[requestKey]requestStamp
	order idQueue[requestKey]
	other map[string]requestStamp
	odd   idQueue[string]
	// copied is the blocks of ids copies brought, in time order, and
	// copiedBy the same by bucket: an id in them is of its block's
	// bucket, and looked up there (copied_requests.go).
	copied   []*copiedRecord
	copiedBy map[uint32][]*copiedRecord
	// kept is the bytes of results the queues hold (with those of ids
	// forgotten whose block is not yet dropped), at most keepLimit
	// (RequestResultsKept; 0 keeps none).
	kept, keepLimit int
}

// RequestResultsKept is how many bytes of the remembered request ids'
// results a replicaset member keeps in memory beside the ids, for the
// copies of moving buckets (and backups) to send without reading them. A
// result is as large as its batch's answer (a replace's holds its tuple);
// once the window's kept results reach this, the next ones are read from
// the database when a copy needs them, until older ones leave the window.
// The memory they take is up to twice this while a block's results grow
// (by append), and their block of ids stays until its last id leaves.
const RequestResultsKept = 64 << 20

// maxKeptResult is the largest result the window keeps: one larger is read
// when needed, so that a few large answers do not take the room of many.
const maxKeptResult = 1 << 10

// requestStamp is when a remembered request id was written (ms, the
// leader-stamped clock) and the bucket its write was of.
type requestStamp struct {
	ms     int64
	bucket uint32
	// rev is the revision its batch made in the bucket (BatchResult's),
	// so that an incremental backup takes the ids remembered after its
	// base without reading the others' answers.
	rev uint64
}

// resultStamp reads the bucket and the revision of a stored BatchResult
// (its fields 4 and 5), and eventStamp those of a stored Event (1 and
// 2), and nothing else of them: a copied request id's result and a
// copied event are kept as the bytes their source stored
// (CopiedRequest.result, CopyChunk.events), and the copy needs only
// these.
func resultStamp(v []byte) (bucket uint32, rev uint64, err error) {
	b, rev, err := storedVarints(v, 4, 5)
	return uint32(b), rev, err
}

func eventStamp(v []byte) (bucket uint32, rev uint64, err error) {
	b, rev, err := storedVarints(v, 1, 2)
	return uint32(b), rev, err
}

// storedVarints reads the varint fields x and y of a message's encoding,
// the last of each (0: absent). It reads varints and skips fields as the
// generated decoder does (which takes a tenth varint byte above 1), and
// checks the framing, not the fields it skips; the fuzz tests
// FuzzResultStampAgreesWithTheDecoder and FuzzEventStampAgreesWithTheDecoder
// hold it to that decoder.
func storedVarints(v []byte, x, y uint64) (xv, yv uint64, err error) {
	for i := 0; i < len(v); {
		tag, n := storedVarint(v[i:])
		if n == 0 {
			return 0, 0, fmt.Errorf("a field's tag at byte %d is cut short or too long", i)
		}
		if num := tag >> 3; (num == x || num == y) && tag&7 == 0 {
			val, m := storedVarint(v[i+n:])
			if m == 0 {
				return 0, 0, fmt.Errorf("field %d at byte %d is cut short or too long", num, i)
			}
			if num == x {
				xv = val
			} else {
				yv = val
			}
			i += n + m
			continue
		}
		skip, err := protohelpers.Skip(v[i:])
		if err != nil {
			return 0, 0, fmt.Errorf("the field at byte %d: %w", i, err)
		}
		if skip <= 0 {
			return 0, 0, fmt.Errorf("the field at byte %d has a negative length", i)
		}
		i += skip
	}
	return xv, yv, nil
}

// storedVarint reads a varint as generated decoders do: at most ten
// bytes, the bits past 64 dropped. n is 0 when v ends first or the
// varint is longer.
func storedVarint(v []byte) (x uint64, n int) {
	for shift := uint(0); shift < 64 && n < len(v); shift += 7 {
		b := v[n]
		n++
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x, n
		}
	}
	return 0, 0
}

// checkCopied checks what the chunks carry as their source stored it:
// the result of every request id they copy is a BatchResult, and every
// event of their history an Event (of a revision), of their chunk's
// bucket. Decoded whole when full (the leader, before the chunks go in
// the log or in its tables, Storage.checkedCopy: a source or a backup
// file may send anything), or read by resultStamp and eventStamp (every
// member at apply, which keeps the bytes and answers a retry from them).
// A block of ids (SortedRequests) is checked whole by the leader, and
// only its framing by the members.
func checkCopied(chunks []*rspb.CopyChunk, full bool) error {
	for _, c := range chunks {
		for _, r := range c.GetRequests() {
			if len(r.GetId()) == 0 || len(r.GetResult()) == 0 {
				continue // nothing to remember (apply skips it)
			}
			var bucket uint32
			var err error
			if full {
				res := &rspb.BatchResult{}
				err = res.UnmarshalVT(r.GetResult())
				bucket = res.GetBucket()
			} else {
				bucket, _, err = resultStamp(r.GetResult())
			}
			switch {
			case err != nil:
				return fmt.Errorf("bucket %d: the result copied with request id %x is not a BatchResult: %w", c.GetBucket(), r.GetId(), err)
			case bucket != c.GetBucket():
				return fmt.Errorf("bucket %d: the result copied with request id %x is of bucket %d", c.GetBucket(), r.GetId(), bucket)
			}
		}
		if s := c.GetSortedRequests(); s != nil {
			var err error
			if full {
				err = blockOf(s).check(c.GetBucket())
			} else {
				err = blockOf(s).framing()
			}
			if err != nil {
				return fmt.Errorf("bucket %d: the block of copied request ids: %w", c.GetBucket(), err)
			}
		}
		for i, v := range c.GetEvents() {
			var bucket uint32
			var rev uint64
			var err error
			if full {
				ev := &rspb.Event{}
				err = ev.UnmarshalVT(v)
				bucket, rev = ev.GetBucket(), ev.GetRevision()
			} else {
				bucket, rev, err = eventStamp(v)
			}
			switch {
			case err != nil:
				return fmt.Errorf("bucket %d: copied event %d is not an Event: %w", c.GetBucket(), i, err)
			case bucket != c.GetBucket() || rev == 0:
				return fmt.Errorf("bucket %d: copied event %d is of bucket %d, revision %d", c.GetBucket(), i, bucket, rev)
			}
		}
	}
	return nil
}

// requestIDLen is the length of every request id the data service takes
// and every id a procedure's write derives.
const requestIDLen = 16

type requestKey [requestIDLen]byte

// idQueue is a window's ids in time order (the clock of the log never
// goes back), in blocks of idBlock: blocks[0][head:] and the blocks
// after it are still in it.
type idQueue[K comparable] struct {
	blocks [][]stampedID[K]
	head   int
	// base is how many ids were dropped with the blocks before
	// blocks[0]: blocks[i][j] is the base+i*idBlock+j-th id the queue
	// ever held, a position that survives the drops.
	base int
	// byBucket indexes the ids still in by bucket: each bucket's
	// positions, in order (ofBuckets reads a moving bucket's ids without
	// walking a window of a million ids and more; 8 bytes an id).
	byBucket map[uint32][]int
	// results[i] holds the results kept of blocks[i]'s ids, one after
	// another (stampedID.res): only appended to, so a result handed out
	// is never written over, and dropped with its block.
	results [][]byte
}

// idBlock is how many ids a block of an idQueue holds. The queue grows a
// block at a time and never copies the ids it holds: a move brings a
// destination a bucket's ids by the thousand, and a queue in one slice,
// grown by append, copied all of them again at each growth (a third of
// the window's cost in a scale out).
const idBlock = 4096

// push appends an id to the queue, with its result if res is not nil.
func (q *idQueue[K]) push(s stampedID[K], res []byte) {
	if q.byBucket == nil {
		q.byBucket = map[uint32][]int{}
	}
	n := len(q.blocks)
	if n == 0 || len(q.blocks[n-1]) == idBlock {
		q.blocks = append(q.blocks, make([]stampedID[K], 0, idBlock))
		q.results = append(q.results, nil)
		n++
	}
	last := &q.blocks[n-1]
	q.byBucket[s.bucket] = append(q.byBucket[s.bucket], q.base+(n-1)*idBlock+len(*last))
	if res != nil {
		r := &q.results[n-1]
		s.res = resultSpan{off: uint32(len(*r)), n: uint32(len(res))}
		*r = append(*r, res...)
	}
	*last = append(*last, s)
}

// result is the result kept with the id at position pos, nil if none is.
func (q *idQueue[K]) result(pos int) []byte {
	i := pos - q.base
	s := &q.blocks[i/idBlock][i%idBlock]
	if s.res.n == 0 {
		return nil
	}
	r := q.results[i/idBlock]
	return r[s.res.off : s.res.off+s.res.n : s.res.off+s.res.n]
}

// at is the id at position pos (one of byBucket's).
func (q *idQueue[K]) at(pos int) *stampedID[K] {
	i := pos - q.base
	return &q.blocks[i/idBlock][i%idBlock]
}

// oldest is the oldest id still in the queue, nil if none is.
func (q *idQueue[K]) oldest() *stampedID[K] {
	if len(q.blocks) == 0 || q.head == len(q.blocks[0]) {
		return nil // blocks[0] is the last block, and all of it is dropped
	}
	return &q.blocks[0][q.head]
}

// each calls fn on every id still in the queue, oldest first.
func (q *idQueue[K]) each(fn func(*stampedID[K])) {
	for i, blk := range q.blocks {
		if i == 0 {
			blk = blk[q.head:]
		}
		for j := range blk {
			fn(&blk[j])
		}
	}
}

// ofBucket calls fn on the ids of bucket b in the queue, oldest first,
// with their results if kept.
func (q *idQueue[K]) ofBucket(b uint32, fn func(s *stampedID[K], res []byte)) {
	for _, pos := range q.byBucket[b] {
		fn(q.at(pos), q.result(pos))
	}
}

type stampedID[K comparable] struct {
	requestStamp
	id  K
	res resultSpan
}

// resultSpan is where in its block's results an id's result is kept (n
// 0: not kept; a BatchResult stored with an id has a revision, so it is
// never empty).
type resultSpan struct{ off, n uint32 }

// load replaces the window's ids and blocks with those fill adds, at once for has,
// and only when fill succeeds (a failed reload leaves the window as it
// was, no smaller: has must never miss an id apply would find).
func (w *requestWindow) load(fill func(add func(id []byte, at requestStamp, res []byte), addRecord func(*copiedRecord)) error) error {
	n := &requestWindow{at: map[requestKey]requestStamp{}, other: map[string]requestStamp{}, copiedBy: map[uint32][]*copiedRecord{}, keepLimit: w.keepLimit}
	if err := fill(n.addLocked, n.addRecordLocked); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at, w.order, w.other, w.odd, w.copied, w.copiedBy, w.kept = n.at, n.order, n.other, n.odd, n.copied, n.copiedBy, n.kept
	return nil
}

// add remembers id, written at at, with res, its result as stored (kept
// while the window has room for it; add copies it).
func (w *requestWindow) add(id []byte, at requestStamp, res []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addLocked(id, at, res)
}

func (w *requestWindow) addLocked(id []byte, at requestStamp, res []byte) {
	if len(res) == 0 || len(res) > maxKeptResult || w.kept+len(res) > w.keepLimit {
		res = nil
	}
	w.kept += len(res)
	if len(id) == requestIDLen {
		k := requestKey(id)
		w.at[k] = at
		w.order.push(stampedID[requestKey]{requestStamp: at, id: k}, res)
		return
	}
	s := string(id)
	w.other[s] = at
	w.odd.push(stampedID[string]{requestStamp: at, id: s}, res)
}

// addRecord remembers the ids of a copy's block, r, in time order after
// every block before it; it keeps r's results while the window has room
// for them, and drops them from r otherwise.
func (w *requestWindow) addRecord(r *copiedRecord) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.addRecordLocked(r)
}

func (w *requestWindow) addRecordLocked(r *copiedRecord) {
	if w.kept+r.kept() > w.keepLimit {
		r.block.results, r.block.ends = nil, nil
	}
	w.kept += r.kept()
	if w.copiedBy == nil {
		w.copiedBy = map[uint32][]*copiedRecord{}
	}
	w.copied = append(w.copied, r)
	w.copiedBy[r.bucket] = append(w.copiedBy[r.bucket], r)
}

// lookup returns when id, written to bucket b, was written, if that was
// at cutoff or later (the apply loop only). An id of a copy's block is
// found only for its bucket.
func (w *requestWindow) lookup(b uint32, id []byte, cutoff int64) (int64, bool) {
	if at, ok := w.stamp(id); ok && at.ms >= cutoff {
		return at.ms, true
	}
	// The newest block first: an older one holding the id too is older.
	if r, _, ok := w.copiedIn(b, id); ok && r.ms >= cutoff {
		return r.ms, true
	}
	return 0, false
}

// copiedAt finds id in a block of bucket b remembered at ms; any
// goroutine.
func (w *requestWindow) copiedAt(b uint32, ms int64, id []byte) (*copiedRecord, int, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, r := range w.copiedBy[b] {
		if r.ms != ms {
			continue
		}
		if at, ok := r.block.find(id); ok {
			return r, at, true
		}
	}
	return nil, 0, false
}

// copiedIn finds id in the newest of bucket b's blocks that holds it.
func (w *requestWindow) copiedIn(b uint32, id []byte) (*copiedRecord, int, bool) {
	rs := w.copiedBy[b]
	for i := len(rs) - 1; i >= 0; i-- {
		if at, ok := rs[i].block.find(id); ok {
			return rs[i], at, true
		}
	}
	return nil, 0, false
}

func (w *requestWindow) stamp(id []byte) (requestStamp, bool) {
	if len(id) == requestIDLen {
		at, ok := w.at[requestKey(id)]
		return at, ok
	}
	at, ok := w.other[string(id)]
	return at, ok
}

// has reports whether id, written to bucket b, is in the window (written
// before its cutoff, perhaps, but not yet forgotten), as lookup finds it;
// any goroutine.
func (w *requestWindow) has(b uint32, id []byte) bool {
	_, ok := w.find(b, id)
	return ok
}

// find returns the stamp of id, written to bucket b, if it is in the
// window, as lookup finds it; any goroutine. The stamp of an id of a
// copy's block has no revision.
func (w *requestWindow) find(b uint32, id []byte) (requestStamp, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if at, ok := w.stamp(id); ok {
		return at, true
	}
	if r, _, ok := w.copiedIn(b, id); ok {
		return requestStamp{ms: r.ms, bucket: b}, true
	}
	return requestStamp{}, false
}

// rememberedID is a request id in the window, when it was written and
// the revision its batch made, and its result as stored if the window kept
// it (not to be changed: it is the window's).
type rememberedID struct {
	id     []byte
	ms     int64
	rev    uint64
	result []byte
}

// remembered is what the window holds of a bucket: its ids, and the
// blocks of ids copies brought it (not to be changed: they are the
// window's).
type remembered struct {
	ids    []rememberedID
	copied []*copiedRecord
}

// ofBuckets returns, for each of buckets, the ids in the window written
// for it; any goroutine. It reads them from the queues' index by bucket,
// under mu for reading (the apply loop's adds wait meanwhile), in O(the
// ids of buckets): the window holds up to RequestIDWindow of writes, a
// million ids and more, and a walk of all of them under mu would hold
// every write of the replicaset for 10-100 ms at each copy stream or
// backup. A bucket's ids of requestIDLen bytes share one allocation.
func (w *requestWindow) ofBuckets(buckets map[uint32]bool) map[uint32]remembered {
	out := map[uint32]remembered{}
	w.mu.RLock()
	defer w.mu.RUnlock()
	for b := range buckets {
		n := len(w.order.byBucket[b])
		rem := remembered{ids: make([]rememberedID, 0, n+len(w.odd.byBucket[b]))}
		ids := make([]byte, 0, requestIDLen*n)
		w.order.ofBucket(b, func(s *stampedID[requestKey], res []byte) {
			if w.at[s.id] == s.requestStamp {
				ids = append(ids, s.id[:]...)
				rem.ids = append(rem.ids, rememberedID{id: ids[len(ids)-requestIDLen : len(ids) : len(ids)], ms: s.ms, rev: s.rev, result: res})
			}
		})
		w.odd.ofBucket(b, func(s *stampedID[string], res []byte) {
			if w.other[s.id] == s.requestStamp {
				rem.ids = append(rem.ids, rememberedID{id: []byte(s.id), ms: s.ms, rev: s.rev, result: res})
			}
		})
		rem.copied = slices.Clone(w.copiedBy[b])
		if len(rem.ids) > 0 || rem.copied != nil {
			out[b] = rem
		}
	}
	return out
}

// forget drops the ids written before cutoff: O(ids dropped).
func (w *requestWindow) forget(cutoff int64) {
	if !w.order.expired(cutoff) && !w.odd.expired(cutoff) && (len(w.copied) == 0 || w.copied[0].ms >= cutoff) {
		return // nothing to drop (the apply loop reads its own queues without mu)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kept -= w.order.forget(w.at, cutoff)
	w.kept -= w.odd.forget(w.other, cutoff)
	for len(w.copied) > 0 && w.copied[0].ms < cutoff {
		r := w.copied[0]
		w.kept -= r.kept()
		// The oldest block of all is the oldest of its bucket's.
		if rs := w.copiedBy[r.bucket]; len(rs) > 1 {
			w.copiedBy[r.bucket] = rs[1:]
		} else {
			delete(w.copiedBy, r.bucket)
		}
		w.copied[0] = nil
		w.copied = w.copied[1:]
	}
}

// expired reports whether the oldest id in q was written before cutoff.
func (q *idQueue[K]) expired(cutoff int64) bool {
	o := q.oldest()
	return o != nil && o.ms < cutoff
}

// forget drops from q, and from at unless written again since, the ids
// written before cutoff; a block all dropped goes, with its results. It
// returns the bytes of the results it let go of.
func (q *idQueue[K]) forget(at map[K]requestStamp, cutoff int64) (dropped int) {
	for s := q.oldest(); s != nil && s.ms < cutoff; s = q.oldest() {
		if at[s.id] == s.requestStamp {
			delete(at, s.id)
		}
		if ps := q.byBucket[s.bucket]; len(ps) > 1 {
			q.byBucket[s.bucket] = ps[1:] // ps[0] is this id's position
		} else {
			delete(q.byBucket, s.bucket)
		}
		*s = stampedID[K]{}
		if q.head++; q.head == idBlock {
			dropped += len(q.results[0])
			q.blocks[0], q.results[0] = nil, nil
			q.blocks, q.results = q.blocks[1:], q.results[1:]
			q.base += idBlock
			q.head = 0
		}
	}
	return dropped
}

// requestSlot is how much of the window (ms) one range deletion of expired
// request ids covers: an id stays stored up to a slot after it has left the
// window, and is never answered from after it left.
func (sm *SM) requestSlot() int64 { return max(sm.window.Milliseconds()/12, 1) }

// requestCutoff is the time (ms) of the oldest write whose request id is
// remembered at clock.
func (sm *SM) requestCutoff(clock int64) int64 { return clock - sm.window.Milliseconds() }

// requestsDroppedBefore is the time (ms) before which every request id is
// deleted, by the clock alone: so every member deletes at the same entries.
func (sm *SM) requestsDroppedBefore(clock int64) int64 {
	c := sm.requestCutoff(clock)
	if c <= 0 {
		return 0
	}
	return c - c%sm.requestSlot()
}

// expireRequests forgets the request ids that left the window at the
// applied clock; it runs at every entry. In the database, a whole slot of
// them goes at once, with one range deletion, when the clock enters the
// next slot: no id is deleted one by one, nothing is scanned.
func (sm *SM) expireRequests(b *pebble.Batch) error {
	sm.reqs.forget(sm.requestCutoff(sm.clock))
	to := sm.requestsDroppedBefore(sm.clock)
	if to <= sm.reqDropped {
		return nil
	}
	sm.reqDropped = to
	if err := b.DeleteRange(sm.k.requestIDs(), sm.k.requestIDsAt(to), nil); err != nil {
		return err
	}
	return b.DeleteRange(sm.k.requestRecords(), sm.k.requestRecordsAt(to), nil)
}

// eachStoredRequest calls fn with every request id stored in r as
// remembered at ms or later (i/ a key each, j/ a record of a copy's), its
// stamp and its result as stored, in the order of their times: the
// window's queue is kept in time order. A record's block of ids goes to
// block whole, in the order of the records.
func (sm *SM) eachStoredRequest(r pebble.Reader, ms int64, fn func(id []byte, at requestStamp, res []byte), block func(*copiedRecord)) error {
	ids, err := r.NewIter(&pebble.IterOptions{LowerBound: sm.k.requestIDsAt(ms), UpperBound: storage.PrefixEnd(sm.k.requestIDs())})
	if err != nil {
		return err
	}
	defer ids.Close()
	recs, err := r.NewIter(&pebble.IterOptions{LowerBound: sm.k.requestRecordsAt(ms), UpperBound: storage.PrefixEnd(sm.k.requestRecords())})
	if err != nil {
		return err
	}
	defer recs.Close()
	idPrefix, recPrefix := len(sm.k.requestIDs()), len(sm.k.requestRecords())
	okID, okRec := ids.First(), recs.First()
	for okID || okRec {
		var idMs, recMs int64
		if okID {
			k := ids.Key()
			if len(k) <= idPrefix+8 {
				return fmt.Errorf("replicaset: request id key %x (a time and a non-empty id expected after the prefix)", k)
			}
			idMs = int64(binary.BigEndian.Uint64(k[idPrefix:]))
		}
		if okRec {
			k := recs.Key()
			if len(k) != recPrefix+20 {
				return fmt.Errorf("replicaset: request record key %x (a time, an index and a chunk expected after the prefix)", k)
			}
			recMs = int64(binary.BigEndian.Uint64(k[recPrefix:]))
		}
		if okID && (!okRec || idMs <= recMs) {
			k := ids.Key()
			v, err := ids.ValueAndErr()
			var bucket uint32
			var rev uint64
			if err == nil {
				bucket, rev, err = resultStamp(v)
			}
			if err != nil {
				return fmt.Errorf("replicaset: the result of request id key %x: %w", k, err)
			}
			fn(k[idPrefix+8:], requestStamp{ms: idMs, bucket: bucket, rev: rev}, v)
			okID = ids.Next()
			continue
		}
		k := recs.Key()
		c, err := requestRecordAt(recs)
		if err != nil {
			return err
		}
		if s := c.GetSortedRequests(); s != nil {
			blk := blockOf(s)
			if err := blk.framing(); err != nil {
				return fmt.Errorf("replicaset: request record %x: its block: %w", k, err)
			}
			block(&copiedRecord{ms: recMs, bucket: c.GetBucket(), index: binary.BigEndian.Uint64(k[recPrefix+8:]), chunk: binary.BigEndian.Uint32(k[recPrefix+16:]), block: blk})
		}
		for _, q := range c.GetRequests() {
			_, rev, err := resultStamp(q.GetResult())
			if err != nil {
				return fmt.Errorf("replicaset: request record %x, request id %x: %w", k, q.GetId(), err)
			}
			fn(q.GetId(), requestStamp{ms: recMs, bucket: c.GetBucket(), rev: rev}, q.GetResult())
		}
		okRec = recs.Next()
	}
	if err := ids.Error(); err != nil {
		return err
	}
	return recs.Error()
}

// storedResult reads the result stored for request id of bucket b,
// remembered at ms: under its key (i/), or else in the record of the copy
// that brought it (j/): its block's, from the window if it kept the
// block's results, else from the block's record; or one of those stored
// at ms, looked through. Nil if none holds it.
func (sm *SM) storedResult(r pebble.Reader, b uint32, ms int64, id []byte) ([]byte, error) {
	v, err := get(r, sm.k.requestID(ms, id))
	if err != nil || v != nil {
		return v, err
	}
	if rec, at, ok := sm.reqs.copiedAt(b, ms, id); ok {
		blk, err := sm.heldBlock(r, rec)
		if err != nil || blk.len() == 0 {
			return nil, err // no record: forgotten
		}
		return blk.result(at), nil
	}
	// Else an id copied one message an id (rememberCopied).
	var found []byte
	err = sm.eachRequestRecordAt(r, ms, func(c *rspb.CopyChunk) bool {
		for _, q := range c.GetRequests() {
			if bytes.Equal(q.GetId(), id) {
				found = q.GetResult()
				return false
			}
		}
		return true
	})
	return found, err
}

// heldBlock is rec's block with its results: the window's, if it kept
// them, else its record's in r (no id if r does not hold the record:
// forgotten, or stored after r was read).
func (sm *SM) heldBlock(r pebble.Reader, rec *copiedRecord) (requestBlock, error) {
	if rec.block.results != nil {
		return rec.block, nil
	}
	k := sm.k.requestRecord(rec.ms, rec.index, rec.chunk)
	v, err := get(r, k)
	if err != nil || v == nil {
		return requestBlock{}, err
	}
	c := &rspb.CopyChunk{}
	if err := c.UnmarshalVT(v); err != nil {
		return requestBlock{}, fmt.Errorf("replicaset: request record %x: %w", k, err)
	}
	blk := blockOf(c.GetSortedRequests())
	if blk.len() != rec.block.len() {
		return requestBlock{}, fmt.Errorf("replicaset: request record %x holds %d ids, the window %d", k, blk.len(), rec.block.len())
	}
	return blk, nil
}

// eachRequestRecordAt calls fn with each record of copied request ids
// stored at ms, until fn returns false.
func (sm *SM) eachRequestRecordAt(r pebble.Reader, ms int64, fn func(*rspb.CopyChunk) bool) error {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: sm.k.requestRecordsAt(ms), UpperBound: sm.k.requestRecordsAt(ms + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		c, err := requestRecordAt(it)
		if err != nil {
			return err
		}
		if !fn(c) {
			return nil
		}
	}
	return it.Error()
}

// requestRecordAt decodes the record of copied request ids at it.
func requestRecordAt(it *pebble.Iterator) (*rspb.CopyChunk, error) {
	v, err := it.ValueAndErr()
	c := &rspb.CopyChunk{}
	if err == nil {
		err = c.UnmarshalVT(v)
	}
	if err != nil {
		return nil, fmt.Errorf("replicaset: request record %x: %w", it.Key(), err)
	}
	return c, nil
}

// loadMemory reads the bucket records, the counts and the request ids in
// the window from r (with the clock already loaded), and publishes the
// records to readers.
func (sm *SM) loadMemory(r pebble.Reader) error {
	buckets := map[uint32]*rspb.BucketState{}
	err := scan(r, sm.k.buckets(), func(k, v []byte) error {
		if len(k) != len(sm.k.buckets())+4 {
			return fmt.Errorf("replicaset: bucket record key %x", k)
		}
		st := &rspb.BucketState{}
		if err := proto.Unmarshal(v, st); err != nil {
			return fmt.Errorf("replicaset: bucket record %x: %w", k, err)
		}
		buckets[binary.BigEndian.Uint32(k[len(k)-4:])] = st
		return nil
	})
	if err != nil {
		return err
	}
	counts := map[uint32]map[uint32]int64{}
	err = scan(r, sm.k.counts(), func(k, v []byte) error {
		if len(k) != len(sm.k.counts())+8 || len(v) != 8 {
			return fmt.Errorf("replicaset: count record %x", k)
		}
		b, sp := binary.BigEndian.Uint32(k[len(k)-8:]), binary.BigEndian.Uint32(k[len(k)-4:])
		if n := int64(binary.BigEndian.Uint64(v)); n > 0 {
			if counts[b] == nil {
				counts[b] = map[uint32]int64{}
			}
			counts[b][sp] = n
		}
		return nil
	})
	if err != nil {
		return err
	}
	revs := map[uint32]uint64{}
	err = scan(r, sm.k.revisions(), func(k, v []byte) error {
		if len(k) != len(sm.k.revisions())+4 || len(v) != 8 {
			return fmt.Errorf("replicaset: revision record %x", k)
		}
		revs[binary.BigEndian.Uint32(k[len(k)-4:])] = binary.BigEndian.Uint64(v)
		return nil
	})
	if err != nil {
		return err
	}
	cutoff := max(sm.requestCutoff(sm.clock), 0)
	if err := sm.reqs.load(func(add func(id []byte, at requestStamp, res []byte), addRecord func(*copiedRecord)) error {
		return sm.eachStoredRequest(r, cutoff, add, addRecord)
	}); err != nil {
		return err
	}
	sm.reqDropped = sm.requestsDroppedBefore(sm.clock)
	sm.buckets, sm.counts, sm.revs = buckets, counts, revs
	sm.hist = map[uint32]*bucketHistory{} // learned again as buckets are written
	sm.changedBuckets = map[uint32]struct{}{}
	sm.changedCounts = map[uint64]struct{}{}
	sm.changedRevs = map[uint32]struct{}{}
	sm.copies = map[uint32]*copyCursor{} // unknown after a load: every copied key is looked up
	sm.notifyOnCommit = false
	sm.pubMu.Lock()
	sm.pub = maps.Clone(buckets)
	sm.pubMu.Unlock()
	return nil
}

// ApplyDone implements multiraft.ApplyObserver: once the apply batch is
// committed, readers see the bucket records it changed; when it was
// dropped, the state machine reloads its memory from the database.
func (sm *SM) ApplyDone(committed bool) {
	if !committed {
		sm.pendingEvents = nil
		sm.reloadErr = sm.load(sm.db) // Apply returns it, if any
		return
	}
	sm.rows.commit()
	sm.feed.publish(sm.pendingEvents, sm.changedBuckets)
	clear(sm.pendingEvents)
	sm.pendingEvents = sm.pendingEvents[:0]
	if len(sm.changedBuckets) > 0 {
		sm.pubMu.Lock()
		for b := range sm.changedBuckets {
			if st := sm.buckets[b]; st != nil {
				sm.pub[b] = st
			} else {
				delete(sm.pub, b)
			}
		}
		sm.pubMu.Unlock()
		clear(sm.changedBuckets)
	}
	if sm.notifyOnCommit {
		sm.notifyOnCommit = false
		sm.notify()
	}
}

// BucketState returns bucket b's record as committed (nil when there is
// none). Records are shared: the caller must not change it.
func (sm *SM) BucketState(b uint32) *rspb.BucketState {
	sm.pubMu.RLock()
	defer sm.pubMu.RUnlock()
	return sm.pub[b]
}

// bucket returns bucket b's record as the apply batch so far leaves it.
func (a *applier) bucket(b uint32) *rspb.BucketState { return a.sm.buckets[b] }

// putBucket writes bucket b's record (never changed afterwards) into the
// batch and the applier's memory.
func (a *applier) putBucket(b uint32, st *rspb.BucketState) {
	if a.err != nil {
		return
	}
	v, err := proto.Marshal(st)
	if err != nil {
		a.err = err
		return
	}
	a.putBucketEncoded(b, st, v)
}

func (a *applier) putBucketEncoded(b uint32, st *rspb.BucketState, v []byte) {
	a.set(a.sm.k.bucket(b), v)
	if a.err == nil {
		a.sm.buckets[b] = st
		a.sm.changedBuckets[b] = struct{}{}
	}
}

func countKey(b, space uint32) uint64 { return uint64(b)<<32 | uint64(space) }

// addCount changes how many tuples of space bucket holds; the count is
// written into the batch once, at the end of the Apply call (writeCounts).
func (a *applier) addCount(bucket, space uint32, delta int64) {
	if delta == 0 || a.err != nil {
		return
	}
	sm := a.sm
	n := sm.counts[bucket][space] + delta
	m := sm.counts[bucket]
	switch {
	case n > 0 && m == nil:
		sm.counts[bucket] = map[uint32]int64{space: n}
	case n > 0:
		m[space] = n
	default:
		delete(m, space)
		if len(m) == 0 {
			delete(sm.counts, bucket)
		}
	}
	sm.changedCounts[countKey(bucket, space)] = struct{}{}
}

// countsDeleted forgets the counts of bucket (of one space, or all when
// all is set) whose keys the batch has just deleted.
func (a *applier) countsDeleted(bucket uint32, space uint32, all bool) {
	sm := a.sm
	if all {
		delete(sm.counts, bucket)
		for ck := range sm.changedCounts {
			if uint32(ck>>32) == bucket {
				delete(sm.changedCounts, ck)
			}
		}
		return
	}
	if m := sm.counts[bucket]; m != nil {
		delete(m, space)
		if len(m) == 0 {
			delete(sm.counts, bucket)
		}
	}
	delete(sm.changedCounts, countKey(bucket, space))
}

// bumpRevision gives bucket b's next batch its revision: one above both
// the last applied here and above (the bucket's revision on the source it
// is received from, 0 if none), written once at the end of the Apply call
// (writeRevisions).
func (a *applier) bumpRevision(b uint32, above uint64) uint64 {
	r := max(a.sm.revs[b], above) + 1
	a.sm.revs[b] = r
	a.sm.changedRevs[b] = struct{}{}
	return r
}

// raiseRevision makes bucket b's revision at least r (a copy's source's).
func (a *applier) raiseRevision(b uint32, r uint64) {
	if r > a.sm.revs[b] {
		a.sm.revs[b] = r
		a.sm.changedRevs[b] = struct{}{}
	}
}

// revisionDeleted forgets bucket b's revision (its data went with it).
func (a *applier) revisionDeleted(b uint32) {
	if _, ok := a.sm.revs[b]; ok {
		delete(a.sm.revs, b)
		a.sm.changedRevs[b] = struct{}{}
	}
}

// writeRevisions writes every revision changed in this Apply call.
func (sm *SM) writeRevisions(b *pebble.Batch) error {
	if len(sm.changedRevs) == 0 {
		return nil
	}
	for _, bucket := range slices.Sorted(maps.Keys(sm.changedRevs)) {
		var err error
		if r, ok := sm.revs[bucket]; ok {
			err = b.Set(sm.k.revision(bucket), binary.BigEndian.AppendUint64(nil, r), nil)
		} else {
			err = b.Delete(sm.k.revision(bucket), nil)
		}
		if err != nil {
			return err
		}
	}
	clear(sm.changedRevs)
	return nil
}

// RevisionOf returns bucket b's revision as r holds it (0: no batch
// applied to it here, nor received with it).
func (sm *SM) RevisionOf(r pebble.Reader, b uint32) (uint64, error) {
	v, err := get(r, sm.k.revision(b))
	if err != nil || v == nil {
		return 0, err
	}
	return decodeRevision(b, v)
}

// decodeRevision is bucket b's revision record v.
func decodeRevision(b uint32, v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("replicaset: revision record of bucket %d has %d bytes", b, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// writeCounts writes every count changed in this Apply call.
func (sm *SM) writeCounts(b *pebble.Batch) error {
	if len(sm.changedCounts) == 0 {
		return nil
	}
	ks := slices.Sorted(maps.Keys(sm.changedCounts))
	clear(sm.changedCounts)
	for _, ck := range ks {
		bucket, space := uint32(ck>>32), uint32(ck)
		key := sm.k.count(bucket, space)
		var err error
		if n := sm.counts[bucket][space]; n > 0 {
			err = b.Set(key, binary.BigEndian.AppendUint64(nil, uint64(n)), nil)
		} else {
			err = b.Delete(key, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
