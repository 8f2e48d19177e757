package replicaset

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// Result is what applying one command gives its proposer (the state
// machine's one result type, multiraft.ProposeAs[Result]): Err, or the
// outcome of the command's kind in its field.
type Result struct {
	// Err: the command could not be applied as a whole (undecodable,
	// unknown, an empty bucket range, a space that does not compile).
	Err     error
	Batch   *BatchOutcome       // Batch
	Schema  SchemaOutcome       // SetSchema
	Buckets BucketsOutcome      // CreateBuckets
	Steps   []*SetBucketOutcome // SetBuckets (and SetBucket: one step), in order
	Copies  []*CopyOutcome      // CopyChunks (and CopyChunk: one chunk), in order
}

// BatchOutcome is what applying a Batch returns to its proposer.
type BatchOutcome struct {
	Result *rspb.BatchResult
	// Duplicate: the request id was seen within RequestIDWindow; Result is
	// the first application's and nothing was applied now.
	Duplicate bool
}

// SchemaOutcome is what applying a SetSchema returns: the version in force.
type SchemaOutcome struct{ Version uint64 }

// BucketsOutcome is what applying a CreateBuckets returns: how many
// records it created (the others existed).
type BucketsOutcome struct{ Created int }

// applier applies one entry (or, for expiry, a run) into the apply batch.
// Reads go through the batch, so they see the run's earlier writes.
type applier struct {
	sm    *SM
	b     *pebble.Batch
	index uint64
	now   int64
	err   error // a storage failure: stops the host
	// records is how many records of copied request ids this entry
	// stored (rememberCopied): the next one's place in its key.
	records uint32
}

// version is the version a write at this entry gives a tuple: the
// group's id in the top 16 bits, the log index below, so that versions
// are unique across replicasets and a tuple keeps its version when its
// bucket moves (compare-and-set stays exact).
func (a *applier) version() uint64 { return Version(a.sm.group, a.index) }

// Version makes a tuple version from a replicaset group and a log index.
func Version(g multiraft.GroupID, index uint64) uint64 { return uint64(g)<<48 | index&(1<<48-1) }

func (a *applier) get(key []byte) []byte {
	if a.err != nil {
		return nil
	}
	v, err := get(a.b, key)
	a.err = err
	return v
}

// getTuple is get for a tuple key, through the row cache.
func (a *applier) getTuple(key []byte) []byte {
	if a.err != nil {
		return nil
	}
	b, ok := a.sm.k.tupleBucket(key)
	if !ok {
		return a.get(key)
	}
	if v, ok := a.sm.rows.lookup(b, key); ok {
		return v
	}
	if a.sm.filters.absent(a, b, key) {
		return nil
	}
	v := a.get(key)
	if a.err == nil {
		a.sm.rows.stageRead(b, key, v)
	}
	return v
}

// set, del and delRange write into the apply batch; what they do to
// tuple keys is staged in the row cache too (rowcache.go). A value given
// to set must not change afterwards.
func (a *applier) set(key, value []byte) {
	if a.err == nil {
		b, tuple := a.sm.k.tupleBucket(key)
		if tuple {
			a.sm.filters.add(b, key)
		}
		a.err = a.b.Set(key, value, nil)
		if tuple && a.err == nil {
			a.sm.rows.stage(b, key, value)
		}
	}
}

// setUncached is set without staging the row in the row cache: for a
// bulk load into a bucket whose cached rows the batch dropped
// (rowCache.dropBucket), which keeps any row of it from being cached
// until the batch is committed.
func (a *applier) setUncached(key, value []byte) {
	if a.err == nil {
		if b, ok := a.sm.k.tupleBucket(key); ok {
			a.sm.filters.add(b, key)
		}
		a.err = a.b.Set(key, value, nil)
	}
}

func (a *applier) del(key []byte) {
	if a.err == nil {
		a.err = a.b.Delete(key, nil)
		if b, ok := a.sm.k.tupleBucket(key); ok && a.err == nil {
			a.sm.rows.stage(b, key, nil)
			a.sm.deleted = append(a.sm.deleted, keySpan{start: key})
		}
	}
}

func (a *applier) delRange(prefix []byte) {
	if a.err == nil {
		end := storage.PrefixEnd(prefix)
		a.sm.filters.dropRange(a.sm.k, prefix, end)
		a.deleteRange(prefix, end)
		if a.err == nil {
			a.sm.rows.stageRange(a.sm.k, prefix, end)
		}
	}
}

// deleteRange deletes [start, end) in the apply batch, and remembers
// that it did (SM.deleted).
func (a *applier) deleteRange(start, end []byte) {
	if a.err == nil {
		a.err = a.b.DeleteRange(start, end, nil)
		a.sm.deleted = append(a.sm.deleted, keySpan{start: start, end: end})
	}
}

// keySpan is the keys in [start, end), or the key start alone when end
// is nil.
type keySpan struct{ start, end []byte }

// deletedWithin tells whether this Apply call's batch deletes a key in
// [first, last].
func (sm *SM) deletedWithin(first, last []byte) bool {
	for _, d := range sm.deleted {
		if bytes.Compare(d.start, last) > 0 {
			continue
		}
		if d.end == nil && bytes.Compare(first, d.start) <= 0 || d.end != nil && bytes.Compare(first, d.end) < 0 {
			return true
		}
	}
	return false
}

func refusal(code rspb.Refusal_Code, op int, format string, args ...any) *rspb.BatchResult {
	return &rspb.BatchResult{Refusal: &rspb.Refusal{Code: code, Op: uint32(op), Message: fmt.Sprintf(format, args...)}}
}

// sendingRefusal refuses a write to bucket b, which this replicaset is
// sending (st): apply's answer, and the leader's before it proposes
// (Storage.refuseFrozen).
func sendingRefusal(b uint32, st *rspb.BucketState) *rspb.BatchResult {
	return refusal(rspb.Refusal_CODE_BUCKET_MOVING, 0, "bucket %d is being sent to %s; writes go there", b, st.GetPeer())
}

// A stored tuple is its version (8 bytes, big-endian) and its encoding.
func encodeStored(version uint64, t []byte) []byte {
	out := make([]byte, 8, 8+len(t))
	binary.BigEndian.PutUint64(out, version)
	return append(out, t...)
}

func decodeStored(v []byte) (uint64, []byte, error) {
	if len(v) < 8 {
		return 0, nil, fmt.Errorf("replicaset: stored tuple of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), v[8:], nil
}

// BucketStateOf returns a bucket's record as r holds it (nil when there is
// none): from memory when r is the state machine's database (BucketState),
// else read from r (a snapshot). Records are shared: never change one.
func (sm *SM) BucketStateOf(r pebble.Reader, b uint32) (*rspb.BucketState, error) {
	if db, ok := r.(*pebble.DB); ok && db == sm.db {
		return sm.BucketState(b), nil
	}
	v, err := get(r, sm.k.bucket(b))
	if err != nil || v == nil {
		return nil, err
	}
	return decodeBucketState(b, v)
}

// decodeBucketState is bucket b's record v.
func decodeBucketState(b uint32, v []byte) (*rspb.BucketState, error) {
	st := &rspb.BucketState{}
	if err := proto.Unmarshal(v, st); err != nil {
		return nil, fmt.Errorf("replicaset: bucket %d record: %w", b, err)
	}
	return st, nil
}

// overlay holds one batch's writes until every op has succeeded. Most
// batches write one or two keys: they are kept in write order in a slice
// and found by a scan; past overlayScan keys a map indexes them.
type overlay struct {
	writes []overlayWrite
	index  map[string]int // key -> its place in writes, once there are more than overlayScan
	counts []spaceCount   // the change of each space's tuple count in the bucket
	puts   int            // how many puts so far: a look made before the last put is stale
	last   lastLook       // the last key looked up, for the next op on the same key
}

// lastLook is what look found for an op's key (a check then a write of the
// same key look it up once): valid while no put followed it.
type lastLook struct {
	space uint32
	key   []byte // the op's key (keys.tuple's is in c)
	puts  int
	c     current
	ok    bool
}

type overlayWrite struct {
	key []byte
	val []byte // nil: deleted
}

type spaceCount struct {
	space uint32
	delta int64
}

const overlayScan = 8

// get returns what the batch wrote at k (nil: deleted) and whether it did.
func (o *overlay) get(k []byte) ([]byte, bool) {
	if o.index != nil {
		i, ok := o.index[string(k)]
		if !ok {
			return nil, false
		}
		return o.writes[i].val, true
	}
	for i := range o.writes {
		if bytes.Equal(o.writes[i].key, k) {
			return o.writes[i].val, true
		}
	}
	return nil, false
}

// put records a write of v (nil: a deletion) at k, which the overlay
// keeps: it must not change afterwards.
func (o *overlay) put(k []byte, v []byte) {
	o.puts++
	if o.index != nil {
		if i, ok := o.index[string(k)]; ok {
			o.writes[i].val = v
			return
		}
		o.index[string(k)] = len(o.writes)
		o.writes = append(o.writes, overlayWrite{key: k, val: v})
		return
	}
	for i := range o.writes {
		if bytes.Equal(o.writes[i].key, k) {
			o.writes[i].val = v
			return
		}
	}
	o.writes = append(o.writes, overlayWrite{key: k, val: v})
	if len(o.writes) > overlayScan {
		o.index = make(map[string]int, 2*len(o.writes))
		for i, w := range o.writes {
			o.index[string(w.key)] = i
		}
	}
}

// count adds d to space sp's change of tuple count.
func (o *overlay) count(sp uint32, d int64) {
	for i := range o.counts {
		if o.counts[i].space == sp {
			o.counts[i].delta += d
			return
		}
	}
	o.counts = append(o.counts, spaceCount{space: sp, delta: d})
}

func (a *applier) batch(c *rspb.Batch) *BatchOutcome {
	sm := a.sm
	id := c.GetRequestId()
	if len(id) > 0 && sm.remembersRequests() {
		if ms, ok := sm.reqs.lookup(c.GetBucket(), id, sm.requestCutoff(a.now)); ok {
			v, err := sm.storedResult(a.b, c.GetBucket(), ms, id)
			if err != nil {
				a.err = err
				return nil
			}
			if v == nil {
				a.err = fmt.Errorf("replicaset: request id %x (written at %d ms) is in memory but not stored", id, ms)
				return nil
			}
			res := &rspb.BatchResult{}
			if err := res.UnmarshalVT(v); err != nil {
				a.err = fmt.Errorf("replicaset: stored result of a request: %w", err)
				return nil
			}
			return &BatchOutcome{Result: res, Duplicate: true}
		}
	}
	schema := sm.Schema()
	if c.GetSchemaVersion() > schema.Version {
		return &BatchOutcome{Result: refusal(rspb.Refusal_CODE_SCHEMA_BEHIND, 0,
			"this replicaset has applied schema version %d, the write names %d; retry", schema.Version, c.GetSchemaVersion())}
	}
	bucket := c.GetBucket()
	st := a.bucket(bucket)
	receiving := false
	switch st.GetState() {
	case rspb.BucketState_STATE_ACTIVE:
	case rspb.BucketState_STATE_RECEIVING:
		// Until its copy is complete the bucket is half here: a key's
		// tuple may still be on the source (prev). Once it is complete,
		// this replicaset holds all of it (the source is frozen; a key
		// deleted here during the copy has no tuple here and was not
		// copied back), so a write needs no prev and leaves no tombstone.
		receiving = !st.GetCopied()
		if g := c.GetPrevGeneration(); receiving && g != 0 && g != st.GetGeneration() {
			return &BatchOutcome{Result: refusal(rspb.Refusal_CODE_NEEDS_PREV, 0,
				"bucket %d is receiving from %s at generation %d; the batch's prev facts are of generation %d", bucket, st.GetPeer(), st.GetGeneration(), g)}
		}
		if sr := c.GetSourceResult(); sr != nil && len(id) > 0 {
			// The source applied this write before its freeze: remember
			// its answer here, apply nothing (if it is that move's source).
			if g := c.GetPrevGeneration(); g != st.GetGeneration() {
				return &BatchOutcome{Result: refusal(rspb.Refusal_CODE_NEEDS_PREV, 0,
					"bucket %d is receiving from %s at generation %d; the source's answer to the request is of generation %d", bucket, st.GetPeer(), st.GetGeneration(), g)}
			}
			a.remember(id, bucket, sr)
			if a.err != nil {
				return nil
			}
			return &BatchOutcome{Result: sr, Duplicate: true}
		}
		if cc := sm.copies[bucket]; cc != nil {
			// The copy looks these keys up from now on (a batch refused
			// below leaves them to a lookup that finds nothing: harmless).
			for _, op := range c.GetOps() {
				cc.wrote(sm.k.tuple(bucket, op.GetSpaceId(), op.GetKey()))
			}
		}
	case rspb.BucketState_STATE_SENDING:
		return &BatchOutcome{Result: sendingRefusal(bucket, st)}
	default:
		return &BatchOutcome{Result: refusal(rspb.Refusal_CODE_WRONG_BUCKET, 0, "bucket %d is %s on this replicaset", bucket, bucketStateName(st))}
	}
	ov := &overlay{}
	res := &rspb.BatchResult{Index: a.index, Results: make([]*rspb.OpResult, 0, len(c.GetOps()))}
	for i, op := range c.GetOps() {
		if receiving && op.GetPrev() == nil {
			return &BatchOutcome{Result: refusal(rspb.Refusal_CODE_NEEDS_PREV, i, "bucket %d is receiving from %s: op %d needs the source's tuple", bucket, st.GetPeer(), i+1)}
		}
		r, ref := a.op(schema, bucket, i, op, ov, receiving)
		if a.err != nil {
			return nil
		}
		if ref != nil {
			return &BatchOutcome{Result: ref}
		}
		res.Results = append(res.Results, r)
	}
	for _, w := range ov.writes {
		if w.val == nil {
			a.del(w.key)
		} else {
			a.set(w.key, w.val)
		}
	}
	slices.SortFunc(ov.counts, func(x, y spaceCount) int { return cmp.Compare(x.space, y.space) })
	for _, sc := range ov.counts {
		a.addCount(bucket, sc.space, sc.delta)
	}
	res.Revision = a.bumpRevision(bucket, c.GetPrevRevision())
	a.recordEvent(c, res)
	if len(id) > 0 {
		a.remember(id, bucket, res)
		if a.err != nil {
			return nil
		}
	}
	return &BatchOutcome{Result: res}
}

// remember stores request id's result, a write's of bucket b, for the
// window: from now on a batch with that id is answered res, not applied.
func (a *applier) remember(id []byte, b uint32, res *rspb.BatchResult) {
	res.Bucket = b
	v, err := res.MarshalVT()
	if err != nil {
		a.err = err
		return
	}
	a.rememberStored(id, requestStamp{ms: a.now, bucket: b, rev: res.GetRevision()}, v)
}

// rememberStored remembers id with v, its write's BatchResult as stored
// (of bucket at.bucket, at revision at.rev), written at at.ms.
func (a *applier) rememberStored(id []byte, at requestStamp, v []byte) {
	a.set(a.sm.k.requestID(at.ms, id), v)
	if a.err == nil {
		a.sm.reqs.add(id, at, v)
	}
}

// read returns the tuple stored at key, as the batch so far leaves it.
func (a *applier) read(ov *overlay, key []byte) (version uint64, t []byte, found bool) {
	v, ok := ov.get(key)
	if !ok {
		v = a.getTuple(key)
	}
	if v == nil {
		return 0, nil, false
	}
	ver, t, err := decodeStored(v)
	if err != nil {
		a.err = err
		return 0, nil, false
	}
	return ver, t, true
}

// current is what a key holds as a batch sees it: on this replicaset, or
// (for a receiving bucket) on its source unless a tombstone says the key
// was deleted here during the move.
type current struct {
	key     []byte // the tuple's key on this replicaset (keys.tuple)
	version uint64
	tuple   []byte
	found   bool
	local   bool // the tuple is on this replicaset
	tomb    bool // a tombstone of the key is on this replicaset
}

func (a *applier) look(ov *overlay, bucket uint32, sp *schema.Space, op *rspb.Op, receiving bool) current {
	if l := &ov.last; l.ok && l.puts == ov.puts && l.space == sp.ID() && bytes.Equal(l.key, op.GetKey()) {
		return l.c
	}
	c := a.lookUp(ov, bucket, sp, op, receiving)
	if a.err == nil {
		ov.last = lastLook{space: sp.ID(), key: op.GetKey(), puts: ov.puts, c: c, ok: true}
	}
	return c
}

func (a *applier) lookUp(ov *overlay, bucket uint32, sp *schema.Space, op *rspb.Op, receiving bool) current {
	key := a.sm.k.tuple(bucket, sp.ID(), op.GetKey())
	ver, t, found := a.read(ov, key)
	c := current{key: key, version: ver, tuple: t, found: found, local: found}
	if found || !receiving {
		return c
	}
	tk := a.sm.k.tombstone(bucket, sp.ID(), op.GetKey())
	if v, ok := ov.get(tk); ok {
		c.tomb = v != nil
	} else {
		c.tomb = a.get(tk) != nil
	}
	if !c.tomb && op.GetPrev().GetFound() {
		c.version, c.tuple, c.found = op.GetPrev().GetVersion(), op.GetPrev().GetTuple(), true
	}
	return c
}

// put writes a tuple at key (c.key is its tuple key here) over what c
// says is there.
func (a *applier) put(ov *overlay, bucket uint32, sp *schema.Space, key []byte, stored []byte, c current) {
	ov.put(c.key, stored)
	if c.tomb {
		ov.put(a.sm.k.tombstone(bucket, sp.ID(), key), nil)
	}
	if !c.local {
		ov.count(sp.ID(), 1)
	}
}

// remove deletes the tuple at key; on a receiving bucket a tombstone keeps
// the copy from bringing it back.
func (a *applier) remove(ov *overlay, bucket uint32, sp *schema.Space, key []byte, c current, receiving bool) {
	if c.local {
		ov.put(c.key, nil)
		ov.count(sp.ID(), -1)
	}
	if receiving {
		ov.put(a.sm.k.tombstone(bucket, sp.ID(), key), binary.BigEndian.AppendUint64(nil, a.version()))
	}
}

// op applies one operation into the overlay; a refusal stops the batch.
func (a *applier) op(schema *Schema, bucket uint32, i int, op *rspb.Op, ov *overlay, receiving bool) (*rspb.OpResult, *rspb.BatchResult) {
	sp := schema.ByID(op.GetSpaceId())
	if sp == nil {
		return nil, refusal(rspb.Refusal_CODE_NO_SUCH_SPACE, i, "op %d: no space with id %d in schema version %d", i+1, op.GetSpaceId(), schema.Version)
	}
	c := a.look(ov, bucket, sp, op, receiving)
	if a.err != nil {
		return nil, nil
	}
	curVer, cur, found := c.version, c.tuple, c.found
	if op.IfVersion != nil {
		if op.GetKind() == rspb.OpKind_OP_KIND_INSERT {
			return nil, refusal(rspb.Refusal_CODE_INVALID, i, "op %d: insert takes no if_version (it requires that no tuple exists)", i+1)
		}
		if curVer != op.GetIfVersion() {
			ref := refusal(rspb.Refusal_CODE_CONDITION_FAILED, i, "op %d (%s in space %s): if_version %d does not hold: the tuple's version is %d",
				i+1, opName(op.GetKind()), sp.Name(), op.GetIfVersion(), curVer)
			ref.Refusal.ActualVersion = curVer
			return nil, ref
		}
	}
	key := op.GetKey()
	switch op.GetKind() {
	case rspb.OpKind_OP_KIND_CHECK:
		if ref := a.check(sp, i, op, c); ref != nil {
			return nil, ref
		}
		// The result carries no tuple: it would be kept with the request
		// id's answer, doubling what a checked write stores (a reader
		// who wants it reads it).
		return &rspb.OpResult{Found: found, Version: curVer}, nil
	case rspb.OpKind_OP_KIND_INSERT:
		if found && op.GetIfAbsent() {
			return &rspb.OpResult{Found: true, Tuple: bytes.Clone(cur), Version: curVer}, nil
		}
		if found {
			return nil, refusal(rspb.Refusal_CODE_DUPLICATE_KEY, i, "op %d: duplicate key %s in space %s", i+1, keyString(key), sp.Name())
		}
		a.put(ov, bucket, sp, key, encodeStored(a.version(), op.GetTuple()), c)
		return &rspb.OpResult{Tuple: op.GetTuple(), Version: a.version()}, nil
	case rspb.OpKind_OP_KIND_REPLACE:
		a.put(ov, bucket, sp, key, encodeStored(a.version(), op.GetTuple()), c)
		return &rspb.OpResult{Found: found, Tuple: op.GetTuple(), Version: a.version()}, nil
	case rspb.OpKind_OP_KIND_UPDATE, rspb.OpKind_OP_KIND_UPSERT:
		if !found {
			if op.GetKind() == rspb.OpKind_OP_KIND_UPDATE {
				return &rspb.OpResult{}, nil
			}
			a.put(ov, bucket, sp, key, encodeStored(a.version(), op.GetTuple()), c)
			return &rspb.OpResult{Tuple: op.GetTuple(), Version: a.version()}, nil
		}
		nt, ref := a.update(sp, i, op, cur)
		if ref != nil {
			return nil, ref
		}
		a.put(ov, bucket, sp, key, encodeStored(a.version(), nt), c)
		return &rspb.OpResult{Found: true, Tuple: nt, Version: a.version()}, nil
	case rspb.OpKind_OP_KIND_DELETE:
		if !found {
			return &rspb.OpResult{}, nil
		}
		a.remove(ov, bucket, sp, key, c, receiving)
		return &rspb.OpResult{Found: true, Tuple: bytes.Clone(cur), Version: curVer}, nil
	}
	return nil, refusal(rspb.Refusal_CODE_INVALID, i, "op %d: unknown kind %d", i+1, op.GetKind())
}

// check refuses the batch unless every condition of a check op holds on
// the key's tuple as c has it. A condition on a field fails when there is
// no tuple. The refusal names the op, the condition and the actual value.
func (a *applier) check(sp *schema.Space, i int, op *rspb.Op, c current) *rspb.BatchResult {
	if op.IfVersion == nil && len(op.GetConditions()) == 0 {
		return refusal(rspb.Refusal_CODE_INVALID, i, "op %d (check in space %s): no condition; give if_version or a field condition", i+1, sp.Name())
	}
	for n, cond := range op.GetConditions() {
		f := int(cond.GetField())
		// The proposer checked that the value is one value of the
		// field's type: the first field is read without decoding a
		// tuple.
		want, err := tuple.DecodeField(cond.GetValue(), 0)
		if err != nil || f >= len(sp.Format()) || cond.GetCompare() == rspb.Compare_COMPARE_UNSPECIFIED || cond.GetCompare() > rspb.Compare_COMPARE_GE {
			return refusal(rspb.Refusal_CODE_INVALID, i, "op %d (check in space %s): condition %d is malformed", i+1, sp.Name(), n+1)
		}
		what := func() string {
			return fmt.Sprintf("op %d (check in space %s): condition %d (%s %s %s) does not hold",
				i+1, sp.Name(), n+1, sp.Format()[f].Name, compareSymbol(cond.GetCompare()), want)
		}
		if !c.found {
			ref := refusal(rspb.Refusal_CODE_CONDITION_FAILED, i, "%s: there is no tuple with key %s", what(), keyString(op.GetKey()))
			ref.Refusal.Condition = uint32(n + 1)
			return ref
		}
		got, err := tuple.DecodeField(c.tuple, f)
		if err != nil {
			a.err = fmt.Errorf("replicaset: stored tuple in space %s: %w", sp.Name(), err)
			return nil
		}
		if !compareHolds(cond.GetCompare(), got, want) {
			ref := refusal(rspb.Refusal_CODE_CONDITION_FAILED, i, "%s: the field is %s", what(), got)
			ref.Refusal.Condition, ref.Refusal.ActualVersion = uint32(n+1), c.version
			ref.Refusal.ActualValue = tuple.AppendTuple(nil, tuple.Tuple{got})
			return ref
		}
	}
	return nil
}

// decodeOne reads a value encoded as a tuple of one value.
func decodeOne(b []byte) (tuple.Value, error) {
	t, err := tuple.DecodeTuple(b)
	if err != nil {
		return tuple.Value{}, err
	}
	if len(t) != 1 {
		return tuple.Value{}, fmt.Errorf("a tuple of %d values, want one", len(t))
	}
	return t[0], nil
}

// compareHolds reports whether "got c want" holds in tuple.Compare's
// order. Values of kinds that do not compare (tuple.Comparable) are
// neither less nor greater: only != holds for them.
func compareHolds(c rspb.Compare, got, want tuple.Value) bool {
	if !tuple.Comparable(got, want) {
		return c == rspb.Compare_COMPARE_NE
	}
	r := tuple.Compare(got, want)
	switch c {
	case rspb.Compare_COMPARE_EQ:
		return r == 0
	case rspb.Compare_COMPARE_NE:
		return r != 0
	case rspb.Compare_COMPARE_LT:
		return r < 0
	case rspb.Compare_COMPARE_LE:
		return r <= 0
	case rspb.Compare_COMPARE_GT:
		return r > 0
	case rspb.Compare_COMPARE_GE:
		return r >= 0
	}
	return false
}

// compareSymbol writes a comparison as the CLI takes it.
func compareSymbol(c rspb.Compare) string {
	switch c {
	case rspb.Compare_COMPARE_EQ:
		return "="
	case rspb.Compare_COMPARE_NE:
		return "!="
	case rspb.Compare_COMPARE_LT:
		return "<"
	case rspb.Compare_COMPARE_LE:
		return "<="
	case rspb.Compare_COMPARE_GT:
		return ">"
	case rspb.Compare_COMPARE_GE:
		return ">="
	}
	return "?"
}

// update applies an op's update operations to the stored tuple cur.
func (a *applier) update(sp *schema.Space, i int, op *rspb.Op, cur []byte) ([]byte, *rspb.BatchResult) {
	t, err := tuple.DecodeTuple(cur)
	if err != nil {
		a.err = fmt.Errorf("replicaset: stored tuple in space %s: %w", sp.Name(), err)
		return nil, nil
	}
	ops, err := tuple.DecodeOps(op.GetOps())
	if err != nil {
		return nil, refusal(rspb.Refusal_CODE_INVALID, i, "op %d: %v", i+1, err)
	}
	nt, err := tuple.ApplyOps(t, ops, sp.Format())
	if err != nil {
		return nil, refusal(rspb.Refusal_CODE_INVALID, i, "op %d (%s in space %s): %v", i+1, opName(op.GetKind()), sp.Name(), err)
	}
	for n, f := range sp.PrimaryKey() {
		if f >= len(nt) || !nt[f].Equal(t[f]) {
			return nil, refusal(rspb.Refusal_CODE_INVALID, i, "op %d (%s in space %s): it changes field %d (%s), part %d of the primary key; delete and insert instead",
				i+1, opName(op.GetKind()), sp.Name(), f+1, sp.Format()[f].Name, n+1)
		}
	}
	enc := tuple.AppendTuple(nil, nt)
	if len(enc) > MaxTupleBytes {
		return nil, refusal(rspb.Refusal_CODE_INVALID, i, "op %d (%s in space %s): the updated tuple has %d bytes, more than %d",
			i+1, opName(op.GetKind()), sp.Name(), len(enc), MaxTupleBytes)
	}
	return enc, nil
}

func opName(k rspb.OpKind) string {
	switch k {
	case rspb.OpKind_OP_KIND_INSERT:
		return "insert"
	case rspb.OpKind_OP_KIND_REPLACE:
		return "replace"
	case rspb.OpKind_OP_KIND_UPDATE:
		return "update"
	case rspb.OpKind_OP_KIND_UPSERT:
		return "upsert"
	case rspb.OpKind_OP_KIND_DELETE:
		return "delete"
	case rspb.OpKind_OP_KIND_CHECK:
		return "check"
	}
	return "unknown op"
}

// keyString renders an encoded key for a message, as JSON.
func keyString(k []byte) string {
	parts, err := tuple.DecodeKey(k)
	if err != nil {
		return fmt.Sprintf("%x", k)
	}
	return string(tuple.AppendJSON(nil, parts))
}

func bucketStateName(st *rspb.BucketState) string {
	switch st.GetState() {
	case rspb.BucketState_STATE_ACTIVE:
		return "active"
	case rspb.BucketState_STATE_SENDING:
		return fmt.Sprintf("sending to %s", st.GetPeer())
	case rspb.BucketState_STATE_RECEIVING:
		return fmt.Sprintf("receiving from %s", st.GetPeer())
	case rspb.BucketState_STATE_GARBAGE:
		return "garbage (moved away)"
	}
	return "not held"
}

// setSchema makes the replicaset's schema group 0's at c.Version. Spaces
// it no longer names are dropped with their tuples, in every bucket.
func (a *applier) setSchema(c *rspb.SetSchema) (SchemaOutcome, error) {
	sm := a.sm
	old := sm.Schema()
	if c.GetVersion() <= old.Version {
		return SchemaOutcome{Version: old.Version}, nil
	}
	next := emptySchema()
	next.Version = c.GetVersion()
	for _, d := range c.GetSpaces() {
		sp, err := meta.CompileSpace(d)
		if err != nil {
			return SchemaOutcome{}, fmt.Errorf("replicaset: schema version %d: %w", c.GetVersion(), err)
		}
		next.add(sp)
	}
	var dropped []uint32
	for _, sp := range old.Spaces() {
		if n := next.ByID(sp.ID()); n == nil {
			dropped = append(dropped, sp.ID())
		}
	}
	slices.Sort(dropped)
	if len(dropped) > 0 {
		buckets := slices.Sorted(maps.Keys(sm.buckets))
		for _, id := range dropped {
			for _, b := range buckets {
				a.delRange(sm.k.tuplePrefix(b, id))
				a.delRange(sm.k.tombstone(b, id, nil))
				a.del(sm.k.count(b, id))
				a.countsDeleted(b, id, false)
			}
			a.del(sm.k.space(id))
		}
	}
	for _, d := range c.GetSpaces() {
		if old.ByID(d.GetId()) != nil {
			continue
		}
		v, err := proto.Marshal(d)
		if err != nil {
			a.err = err
			return SchemaOutcome{}, nil
		}
		a.set(sm.k.space(d.GetId()), v)
	}
	a.set(sm.k.schema(), binary.BigEndian.AppendUint64(nil, next.Version))
	sm.schema.Store(next)
	return SchemaOutcome{Version: next.Version}, nil
}

// createBuckets creates active records for buckets without one.
func (a *applier) createBuckets(c *rspb.CreateBuckets) (BucketsOutcome, error) {
	if c.GetFirst() < 1 || c.GetFirst() > c.GetLast() {
		return BucketsOutcome{}, fmt.Errorf("replicaset: bucket range [%d, %d] is empty", c.GetFirst(), c.GetLast())
	}
	rec, err := proto.Marshal(&rspb.BucketState{State: rspb.BucketState_STATE_ACTIVE, Generation: c.GetGeneration()})
	if err != nil {
		a.err = err
		return BucketsOutcome{}, nil
	}
	st := &rspb.BucketState{State: rspb.BucketState_STATE_ACTIVE, Generation: c.GetGeneration()}
	created := 0
	for b := c.GetFirst(); b <= c.GetLast() && a.err == nil; b++ {
		if a.bucket(b) != nil {
			continue
		}
		a.putBucketEncoded(b, st, rec)
		created++
	}
	return BucketsOutcome{Created: created}, nil
}
