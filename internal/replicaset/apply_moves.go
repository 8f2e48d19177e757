package replicaset

import (
	"bytes"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// Bucket moves, the replicaset's side (docs/design/moves.md). Every
// step is an entry of the source's or the destination's log, checked at
// apply against the bucket's record, so a step that a crash or a new
// mover repeats is a no-op (or refused), and a bucket never becomes
// active on two replicasets from the same move.

// SetBucketOutcome is what applying a SetBucket returns.
type SetBucketOutcome struct {
	// Changed: the record moved to the asked state now; false with a nil
	// Refused: it was already there (a repeated step).
	Changed bool
	// Refused says why the transition is not allowed (nil when it is).
	Refused error
	// Record is the bucket's record after the command (nil: none).
	Record *rspb.BucketState
	// Deleted counts, for GARBAGE, the tuples deleted by space id.
	Deleted map[uint32]uint64
}

// CopyOutcome is what applying a CopyChunk returns.
type CopyOutcome struct {
	// Sent counts the tuples the chunk brought (in its tuples or its
	// table); Copied those inserted, in all and by space id; the others
	// were on the destination already or deleted there during the move.
	Sent    int
	Copied  int
	BySpace map[uint32]uint64
	Refused error
}

var stateNames = map[rspb.BucketState_State]string{
	rspb.BucketState_STATE_ACTIVE:    "ACTIVE",
	rspb.BucketState_STATE_SENDING:   "SENDING",
	rspb.BucketState_STATE_RECEIVING: "RECEIVING",
	rspb.BucketState_STATE_GARBAGE:   "GARBAGE",
}

func describeRecord(st *rspb.BucketState) string {
	if st == nil {
		return "no record"
	}
	return fmt.Sprintf("%s(generation %d, peer %q)", stateNames[st.GetState()], st.GetGeneration(), st.GetPeer())
}

// CheckStep says what a bucket step does to the record cur (nil: none):
// repeated when the record is already at the step's state and generation
// (a no-op), else why it is refused ("" when allowed). It is the rule
// every replicaset applies, and the one the mover's tests' fake
// replicaset follows.
func CheckStep(cur *rspb.BucketState, c *rspb.SetBucket) (repeated bool, refused string) {
	g := c.GetGeneration()
	if cur.GetState() == c.GetState() && cur.GetGeneration() == g {
		return true, ""
	}
	if cur != nil && c.GetFrom() != rspb.BucketState_STATE_UNSPECIFIED && cur.GetState() != c.GetFrom() {
		return false, "the record is not " + stateNames[c.GetFrom()]
	}
	switch c.GetState() {
	case rspb.BucketState_STATE_SENDING:
		if cur.GetState() != rspb.BucketState_STATE_ACTIVE || g <= cur.GetGeneration() {
			return false, "only an active bucket is sent, at a higher generation"
		}
	case rspb.BucketState_STATE_RECEIVING:
		// Leftovers of an earlier stay are gone with its GARBAGE step.
		if cur != nil && (cur.GetState() != rspb.BucketState_STATE_GARBAGE || g <= cur.GetGeneration()) {
			return false, "only a bucket this replicaset does not hold (or gave away at a lower generation) is received"
		}
	case rspb.BucketState_STATE_ACTIVE:
		switch {
		case cur.GetState() == rspb.BucketState_STATE_RECEIVING && g == cur.GetGeneration() && !cur.GetCopied():
			return false, "the copy from " + cur.GetPeer() + " is not complete"
		case cur.GetState() == rspb.BucketState_STATE_RECEIVING && g == cur.GetGeneration():
		case cur.GetState() == rspb.BucketState_STATE_SENDING && g == cur.GetGeneration():
			// An aborted send: the destination never served the bucket.
		case cur.GetState() == rspb.BucketState_STATE_ACTIVE && g > cur.GetGeneration():
			// An aborted send whose SENDING step was not applied (yet): the
			// record takes the move's generation, so that the step, if it
			// is still in the log, is refused when it comes (a fence).
		default:
			return false, "a bucket becomes active only when its receive completes or its send is aborted, at that generation"
		}
	case rspb.BucketState_STATE_GARBAGE:
		switch {
		case (cur.GetState() == rspb.BucketState_STATE_SENDING || cur.GetState() == rspb.BucketState_STATE_RECEIVING) && g == cur.GetGeneration():
		case cur == nil, cur.GetState() == rspb.BucketState_STATE_GARBAGE && g > cur.GetGeneration():
			// An aborted receive whose RECEIVING step was not applied
			// (yet): a record of the move's generation, so that the step,
			// if it is still in the log, is refused when it comes (a fence).
		default:
			return false, "only a bucket being sent (or an aborted receive) becomes garbage, at its generation"
		}
	default:
		return false, "unknown state"
	}
	return false, ""
}

func (a *applier) setBucket(c *rspb.SetBucket) *SetBucketOutcome {
	b := c.GetBucket()
	cur := a.bucket(b)
	want := &rspb.BucketState{State: c.GetState(), Generation: c.GetGeneration(), Peer: c.GetPeer()}
	repeated, why := CheckStep(cur, c)
	switch {
	case repeated:
		return &SetBucketOutcome{Record: cur}
	case why != "":
		return &SetBucketOutcome{Record: cur, Refused: fmt.Errorf("bucket %d: %s -> %s refused: %s", b, describeRecord(cur), describeRecord(want), why)}
	}
	var deleted map[uint32]uint64
	switch want.GetState() {
	case rspb.BucketState_STATE_ACTIVE:
		if cur.GetState() == rspb.BucketState_STATE_RECEIVING {
			a.delRange(a.sm.k.bucketTombstones(b)) // the copy is complete
		}
	case rspb.BucketState_STATE_GARBAGE:
		deleted = map[uint32]uint64{}
		for sp, n := range a.sm.counts[b] {
			deleted[sp] = uint64(n)
		}
		a.delRange(a.sm.k.bucketTuples(b))
		a.delRange(a.sm.k.bucketTombstones(b))
		a.delRange(a.sm.k.bucketCounts(b))
		a.countsDeleted(b, 0, true)
		a.revisionDeleted(b)
		a.delRange(a.sm.k.bucketEvents(b))
		delete(a.sm.hist, b)
	}
	a.putBucket(b, want)
	if a.err != nil {
		return nil
	}
	if want.GetState() == rspb.BucketState_STATE_RECEIVING {
		a.sm.copies[b] = &copyCursor{}
	} else {
		delete(a.sm.copies, b)
	}
	return &SetBucketOutcome{Changed: true, Record: want, Deleted: deleted}
}

// copyCursor is what a member knows of a receiving bucket's keys since it
// applied the bucket's RECEIVING step itself: the keys that writes touched
// (a tuple or a tombstone; up to copyWrittenKeys of them, then only that
// some were), and the largest key a copy inserted. A key above that
// largest one that no write touched can have neither a tuple nor a
// tombstone here, so the copy inserts it without looking it up (the source
// streams its keys in order, so that is nearly every key, even while
// clients write the bucket: a lookup of an absent key costs Pebble a walk
// of its memtables, 4-5 times the insert). A member that loaded its state
// from disk has no cursor and looks up every key; the entries' effects are
// the same on every member either way.
type copyCursor struct {
	written map[string]struct{} // tuple keys written
	many    bool                // more than copyWrittenKeys: every key is looked up
	high    []byte              // the largest tuple key copied
}

// copyWrittenKeys bounds the keys a copy cursor remembers as written.
const copyWrittenKeys = 4096

// wrote remembers that a write touched the tuple key.
func (cc *copyCursor) wrote(k []byte) {
	switch {
	case cc.many:
	case len(cc.written) >= copyWrittenKeys:
		cc.many, cc.written = true, nil
	default:
		if cc.written == nil {
			cc.written = map[string]struct{}{}
		}
		cc.written[string(k)] = struct{}{}
	}
}

// absent reports whether the copy may insert the tuple key without
// looking it up, and remembers it as copied.
func (cc *copyCursor) absent(k []byte) bool {
	if cc == nil {
		return false
	}
	above := bytes.Compare(k, cc.high) > 0
	if above {
		cc.high = append(cc.high[:0], k...)
	}
	if cc.many {
		return false
	}
	_, touched := cc.written[string(k)]
	return above && !touched
}

// copyChunks applies a CopyChunks entry: its tables first (the buckets'
// rows; CopyChunks.tables), then each chunk. Tables refused refuse every
// chunk.
func (a *applier) copyChunks(cc *rspb.CopyChunks) []*CopyOutcome {
	outs := make([]*CopyOutcome, len(cc.GetChunks()))
	if refused := checkCopied(cc.GetChunks(), false); refused != nil {
		for j := range outs {
			outs[j] = &CopyOutcome{Refused: refused}
		}
		return outs
	}
	var tabled map[uint32]*tableCopied
	if len(cc.GetTables()) > 0 {
		var refused error
		tabled, refused = a.copyTables(cc.GetChunks(), cc.GetTables(), cc.GetSummaries())
		if a.err != nil {
			return nil
		}
		if refused != nil {
			for j := range outs {
				outs[j] = &CopyOutcome{Refused: refused}
			}
			return outs
		}
	}
	for j, c := range cc.GetChunks() {
		// A bucket's rows in the tables count with its first chunk
		// applied.
		outs[j] = a.copyChunk(c, tabled[c.GetBucket()])
		if outs[j] != nil && outs[j].Refused == nil {
			delete(tabled, c.GetBucket())
		}
	}
	return outs
}

// rememberCopied remembers the request ids a chunk of bucket b brought
// one message an id (those of other lengths than requestIDLen, and all
// of a source or a backup that sends no blocks: rememberBlock takes the
// blocks) but those this replicaset knows already (it answered them itself, from
// the source's answer asked by a write), with their results as the
// source stored them (copyChunks checked that each names the bucket:
// checkCopied), stamped with this log's clock, not the source's:
// remembered a little longer, never less. The database keeps them as one
// record under that time (requestRecord), not a key each: a copy brings
// them by the thousand, and a key each cost every member an insert into
// its apply batch's index and then its memtable, and a flush
// (docs/benchmarks.md, "Copied request ids as one record").
func (a *applier) rememberCopied(b uint32, reqs []*rspb.CopiedRequest) {
	cutoff := a.sm.requestCutoff(a.now)
	var kept []*rspb.CopiedRequest
	for _, r := range reqs {
		if len(r.GetId()) == 0 || len(r.GetResult()) == 0 {
			continue
		}
		if _, ok := a.sm.reqs.lookup(b, r.GetId(), cutoff); ok {
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) == 0 {
		return
	}
	v, err := (&rspb.CopyChunk{Bucket: b, Requests: kept}).MarshalVT()
	if err != nil {
		a.err = err
		return
	}
	a.set(a.sm.k.requestRecord(a.now, a.index, a.records), v)
	a.records++
	if a.err != nil {
		return
	}
	a.sm.reqs.mu.Lock()
	defer a.sm.reqs.mu.Unlock()
	for _, r := range kept {
		_, rev, _ := resultStamp(r.GetResult())
		a.sm.reqs.addLocked(r.GetId(), requestStamp{ms: a.now, bucket: b, rev: rev}, r.GetResult())
	}
}

// rememberBlock remembers the block of request ids a chunk of bucket b
// brought (copied_requests.go) as it came: stored as one record, under
// this log's clock as rememberCopied's, and held in the window as it is.
// Ids this replicaset knows already are kept in it too: a lookup finds
// them either way, and a copy of the bucket onwards sends each once
// (sortedRequests).
func (a *applier) rememberBlock(b uint32, s *rspb.SortedRequests) {
	blk := blockOf(s)
	if blk.len() == 0 {
		return
	}
	v, err := (&rspb.CopyChunk{Bucket: b, SortedRequests: s}).MarshalVT()
	if err != nil {
		a.err = err
		return
	}
	r := &copiedRecord{ms: a.now, bucket: b, index: a.index, chunk: a.records, block: blk}
	a.set(a.sm.k.requestRecord(r.ms, r.index, r.chunk), v)
	a.records++
	if a.err != nil {
		return
	}
	a.sm.reqs.addRecord(r)
}

// copyTakes says whether a bucket of record st takes a copy's chunk (or
// a table's rows): a move's where it is receiving at the chunk's
// generation; a backup's (restore) where it is active, at any generation,
// which is where the restored cluster keeps it (docs/design/backup.md).
func copyTakes(st *rspb.BucketState, restore bool, generation uint64) bool {
	if restore {
		return st.GetState() == rspb.BucketState_STATE_ACTIVE
	}
	return st.GetState() == rspb.BucketState_STATE_RECEIVING && st.GetGeneration() == generation
}

// copyChunk applies one chunk; tabled is what the entry's tables brought
// its bucket (nil: nothing).
func (a *applier) copyChunk(c *rspb.CopyChunk, tabled *tableCopied) *CopyOutcome {
	b := c.GetBucket()
	cur := a.bucket(b)
	switch {
	case copyTakes(cur, c.GetRestore(), c.GetGeneration()):
	case c.GetRestore():
		return &CopyOutcome{Refused: fmt.Errorf("bucket %d is %s here, not active: a backup is restored only into a bucket the replicaset holds", b, describeRecord(cur))}
	default:
		return &CopyOutcome{Refused: fmt.Errorf("bucket %d is %s here, not receiving at generation %d", b, describeRecord(cur), c.GetGeneration())}
	}
	copied, sent := 0, len(c.GetTuples())
	counts := map[uint32]int64{}
	bySpace := map[uint32]uint64{}
	if tabled != nil {
		sent += tabled.sent
		copied += tabled.copied
		for sp, n := range tabled.bySpace {
			bySpace[sp] += n
			counts[sp] += int64(n)
		}
	}
	cc := a.sm.copies[b]
	// The copy is a bulk load: its rows stay out of the row cache (caching
	// them cost a third of the copy's time), and the bucket's cached rows
	// are dropped instead, so that none says a copied key is absent.
	a.sm.rows.dropBucket(a.sm.k, b)
	for _, t := range c.GetTuples() {
		if a.sm.Schema().ByID(t.GetSpaceId()) == nil {
			continue // the space was dropped meanwhile
		}
		tk := a.sm.k.tuple(b, t.GetSpaceId(), t.GetKey())
		if !cc.absent(tk) && (a.get(tk) != nil || a.get(a.sm.k.tombstone(b, t.GetSpaceId(), t.GetKey())) != nil) {
			continue
		}
		a.setUncached(tk, encodeStored(t.GetVersion(), t.GetTuple()))
		counts[t.GetSpaceId()]++
		bySpace[t.GetSpaceId()]++
		copied++
	}
	for sp, n := range counts {
		a.addCount(b, sp, n)
	}
	a.copyEvents(b, c.GetEvents())
	a.rememberCopied(b, c.GetRequests())
	a.rememberBlock(b, c.GetSortedRequests())
	if a.err != nil {
		return nil
	}
	if c.GetLast() {
		// Counted again from the rows: a copy table ingested again (after
		// a crash before its entry's batch committed) inserts nothing and
		// so counts nothing (copy_files.go). Not where this member applied
		// the bucket's RECEIVING step itself (it has its copy cursor):
		// every entry of the copy was then applied once, since a dropped
		// batch, a restart and a restored snapshot all load the state
		// again, which forgets the cursors, so its counts are exact.
		if cc == nil {
			a.recount(b)
		}
		a.raiseRevision(b, c.GetRevision())
		if c.GetRestore() {
			return &CopyOutcome{Sent: sent, Copied: copied, BySpace: bySpace}
		}
		rec := proto.CloneOf(cur)
		rec.Copied = true
		a.putBucket(b, rec)
		if a.err != nil {
			return nil
		}
	}
	return &CopyOutcome{Sent: sent, Copied: copied, BySpace: bySpace}
}
