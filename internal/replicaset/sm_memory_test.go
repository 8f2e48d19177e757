package replicaset

import (
	"bytes"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/tuple"
)

// storedRequestIDs counts the request ids the database holds: under keys
// of their own, and in the records of copies.
func (f *fixture) storedRequestIDs() int {
	f.t.Helper()
	n := 0
	if err := scan(f.db, f.sm.k.requestIDs(), func(_, _ []byte) error { n++; return nil }); err != nil {
		f.t.Fatal(err)
	}
	if err := scan(f.db, f.sm.k.requestRecords(), func(_, v []byte) error {
		c := &rspb.CopyChunk{}
		if err := c.UnmarshalVT(v); err != nil {
			return err
		}
		n += len(c.GetRequests()) + blockOf(c.GetSortedRequests()).len()
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// reopen makes a new state machine over the fixture's database, as a
// restart does.
func (f *fixture) reopen() {
	f.t.Helper()
	sm, err := New(f.db, 7)
	if err != nil {
		f.t.Fatal(err)
	}
	f.sm = sm
}

func requestID(n byte) []byte { return bytes.Repeat([]byte{n}, 16) }

// An id is remembered while its write is at most RequestIDWindow older than
// the log's clock, and forgotten from one millisecond later, whether the
// state machine was reopened in between or not.
func TestRequestIDsAreRememberedExactlyForTheWindowAcrossAReopen(t *testing.T) {
	f := newFixture(t)
	f.setup()
	t0 := f.now
	w := RequestIDWindow.Milliseconds()
	ins := func(id byte, shop uint64) *rspb.Batch {
		return &rspb.Batch{RequestId: requestID(id), Bucket: 5, Ops: []*rspb.Op{insertOp(t, offer(shop, "x", 1))}}
	}
	first := f.ok(ins(1, 1))
	f.now = t0 + w/2
	second := f.ok(ins(2, 2))
	tick := func() {
		f.apply(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 1}}})
	}

	// Just inside the window, after a reopen: both are remembered.
	f.now = t0 + w
	tick()
	f.reopen()
	if o := f.batch(ins(1, 1)); !o.Duplicate || o.Result.GetIndex() != first.GetIndex() {
		t.Fatalf("id 1 at the window's edge after a reopen: %+v, want the first answer (index %d)", o, first.GetIndex())
	}

	// Just outside, after a reopen: the first is forgotten, the second is not.
	f.now = t0 + w + 1
	tick()
	f.reopen()
	if o := f.batch(ins(1, 1)); o.Duplicate || o.Result.GetRefusal().GetCode() != rspb.Refusal_CODE_DUPLICATE_KEY {
		t.Fatalf("id 1 a millisecond after the window: %+v, want it forgotten (a duplicate key)", o)
	}
	if o := f.batch(ins(2, 2)); !o.Duplicate || o.Result.GetIndex() != second.GetIndex() {
		t.Fatalf("id 2 inside its window: %+v", o)
	}

	// The clock never goes back: an entry stamped earlier (a former
	// leader's) does not bring the first id back, before or after a reopen.
	f.now = t0
	if o := f.batch(ins(1, 1)); o.Duplicate {
		t.Fatalf("id 1 under an older stamp: %+v", o)
	}
	f.reopen()
	if o := f.batch(ins(1, 1)); o.Duplicate {
		t.Fatalf("id 1 under an older stamp after a reopen: %+v", o)
	}

	// Both leave the database a slot after leaving the window.
	f.now = t0 + w/2 + w + f.sm.requestSlot() + 1
	tick()
	if n := f.storedRequestIDs(); n != 0 {
		t.Fatalf("%d request ids stored after both left the window", n)
	}
	if n, _ := f.sm.Count(f.db, 1); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
}

// A member restored from a snapshot answers a retry as the member that
// took it would.
func TestARestoredMemberDedupesTheSameRequestIDs(t *testing.T) {
	f := newFixture(t)
	f.setup()
	b := &rspb.Batch{RequestId: requestID(9), Bucket: 7, Ops: []*rspb.Op{insertOp(t, offer(7, "a", 1))}}
	first := f.ok(b)
	var buf bytes.Buffer
	if err := f.sm.Snapshot(t.Context(), f.db, &buf); err != nil {
		t.Fatal(err)
	}
	g := newFixture(t)
	g.index, g.now = f.index, f.now+1000
	if err := g.sm.Restore(t.Context(), g.db, &buf); err != nil {
		t.Fatal(err)
	}
	if o := g.batch(proto.CloneOf(b)); !o.Duplicate || o.Result.GetIndex() != first.GetIndex() {
		t.Fatalf("a retry on the restored member: %+v, want the first answer", o)
	}
	if st := g.sm.BucketState(7); st.GetState() != rspb.BucketState_STATE_ACTIVE {
		t.Fatalf("restored bucket 7: %v", st)
	}
	if n, _ := g.sm.Count(g.db, 1); n != 1 {
		t.Fatalf("restored count %d, want 1", n)
	}
}

// Readers see a bucket record once its batch is committed; a dropped
// batch leaves neither the records, nor the counts, nor the request ids
// changed.
func TestADroppedBatchLeavesTheMemoryAsCommitted(t *testing.T) {
	f := newFixture(t)
	f.setup()
	applyOnly := func(cmds ...*rspb.Command) (*pebble.Batch, []any) {
		t.Helper()
		b := f.db.NewIndexedBatch()
		var entries []multiraft.Entry
		for _, c := range cmds {
			c.NowUnixMs = f.now
			data, err := Encode(c)
			if err != nil {
				t.Fatal(err)
			}
			f.index++
			entries = append(entries, multiraft.Entry{Index: f.index, Term: 1, Cmd: data})
		}
		out, err := f.sm.Apply(b, entries)
		if err != nil {
			t.Fatal(err)
		}
		return b, out
	}
	write := &rspb.Batch{RequestId: requestID(3), Bucket: 4, Ops: []*rspb.Op{insertOp(t, offer(4, "a", 1))}}
	b, _ := applyOnly(
		&rspb.Command{Op: &rspb.Command_Batch{Batch: write}},
		&rspb.Command{Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: []*rspb.SetBucket{{Bucket: 6, State: rspb.BucketState_STATE_SENDING, Generation: 2, Peer: "rs2"}}}}},
	)
	if st := f.sm.BucketState(6); st.GetState() != rspb.BucketState_STATE_ACTIVE {
		t.Fatalf("bucket 6 is %v to readers before its batch is committed", st)
	}
	_ = b.Close()
	f.sm.ApplyDone(false)
	if st := f.sm.BucketState(6); st.GetState() != rspb.BucketState_STATE_ACTIVE {
		t.Fatalf("bucket 6 is %v after its batch was dropped", st)
	}
	// The dropped write is not remembered, its count not kept: applied
	// again, it is a first write.
	if o := f.batch(proto.CloneOf(write)); o.Duplicate || o.Result.GetRefusal() != nil {
		t.Fatalf("the dropped write applied again: %+v", o)
	}
	if n, _ := f.sm.Count(f.db, 1); n != 1 {
		t.Fatalf("count %d, want 1", n)
	}
	f.ok(&rspb.Batch{Bucket: 6, Ops: []*rspb.Op{insertOp(t, offer(6, "a", 1))}}) // bucket 6 still takes writes

	// Committed: readers see it after ApplyDone.
	b, _ = applyOnly(&rspb.Command{Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: []*rspb.SetBucket{{Bucket: 6, State: rspb.BucketState_STATE_SENDING, Generation: 2, Peer: "rs2"}}}}})
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	ch := f.sm.Changed()
	f.sm.ApplyDone(true)
	if st := f.sm.BucketState(6); st.GetState() != rspb.BucketState_STATE_SENDING {
		t.Fatalf("bucket 6 is %v after its batch was committed", st)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed was not closed at the committed change of a bucket")
	}
	f.reopen()
	if st := f.sm.BucketState(6); st.GetState() != rspb.BucketState_STATE_SENDING || st.GetPeer() != "rs2" {
		t.Fatalf("bucket 6 after a reopen: %v", st)
	}
}

// The same log gives the same database on every member, however the
// engine splits it into Apply calls, and whether a member was reopened on
// the way: tuples, counts, bucket records and request ids alike.
func TestTheSameLogGivesTheSameStateWhateverTheRuns(t *testing.T) {
	sp := offersSpace(1)
	var cmds []*rspb.Command
	now := int64(1_800_000_000_000)
	cmds = append(cmds,
		&rspb.Command{NowUnixMs: now, Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{sp}}}},
		&rspb.Command{NowUnixMs: now, Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: 20, Generation: 1}}})
	rng := mrand.New(mrand.NewPCG(3, 4))
	var ids [][]byte
	for i := range 3000 {
		now += int64(rng.IntN(200)) // about 6 minutes in all: ids leave the window
		shop := uint64(rng.IntN(40))
		tp := offer(shop, fmt.Sprint(rng.IntN(5)), float64(i))
		kb := key(t, tp[0], tp[1])
		bucket := uint32(shop%20) + 1
		var op *rspb.Op
		switch rng.IntN(4) {
		case 0:
			op = &rspb.Op{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: kb}
		case 1:
			op = &rspb.Op{Kind: rspb.OpKind_OP_KIND_INSERT, SpaceId: 1, Key: kb, Tuple: enc(tp)}
		default:
			op = &rspb.Op{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: kb, Tuple: enc(tp)}
		}
		id := make([]byte, 16)
		switch {
		case len(ids) > 0 && rng.IntN(5) == 0:
			id = ids[rng.IntN(len(ids))] // a retry, in or out of the window
		default:
			for j := range id {
				id[j] = byte(rng.Uint32())
			}
			ids = append(ids, id)
		}
		c := &rspb.Command{NowUnixMs: now, Op: &rspb.Command_Batch{Batch: &rspb.Batch{RequestId: id, Bucket: bucket, Ops: []*rspb.Op{op}}}}
		// A bucket moves away and back: sent (its tuples deleted with
		// their counts), then received with a copy, then active again.
		moving, gen := uint32(i/500%20)+1, uint64(10+i/500*10)
		set := func(st rspb.BucketState_State, gen uint64) *rspb.Command {
			return &rspb.Command{NowUnixMs: now, Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: []*rspb.SetBucket{{Bucket: moving, State: st, Generation: gen, Peer: "rs2"}}}}}
		}
		switch i % 500 {
		case 100:
			c = set(rspb.BucketState_STATE_SENDING, gen)
		case 150:
			c = set(rspb.BucketState_STATE_GARBAGE, gen)
		case 200:
			c = set(rspb.BucketState_STATE_RECEIVING, gen+1)
		case 250:
			tp := offer(uint64(moving), "copied", 1)
			cc := &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{{Bucket: moving, Generation: gen + 1, Last: true,
				Tuples: []*rspb.CopiedTuple{{SpaceId: 1, Key: key(t, tp[0], tp[1]), Version: 5, Tuple: enc(tp)}}}}}
			if fixtureCopyTables {
				var err error
				if cc.Tables, cc.Summaries, err = (&SM{k: newKeys(7)}).CopyTables(nil, cc.GetChunks()); err != nil {
					t.Fatal(err)
				}
			}
			c = &rspb.Command{NowUnixMs: now, Op: &rspb.Command_CopyChunks{CopyChunks: cc}}
		case 300:
			c = set(rspb.BucketState_STATE_ACTIVE, gen+1)
		}
		cmds = append(cmds, c)
	}
	// rowCache sizes the row cache (0: none), filters the key filters (0:
	// none; filterKeys, if more than 1, is the largest bucket they cover,
	// and 1 sizes them for a key or two instead); every
	// dropEvery-th run is first applied into a batch that is dropped
	// (ApplyDone(false)), as when a commit fails, then applied again.
	run := func(maxRun int, reopenEvery int, seed uint64, rowCache int64, dropEvery int, filters, filterKeys int64) (string, []string) {
		setup := func(sm *SM) {
			sm.SetRowCacheBytes(rowCache)
			sm.SetKeyFilterBytes(filters)
			if filterKeys > 1 {
				sm.filters.maxKeys = filterKeys
			}
			if filterKeys == 1 {
				sm.filters.minCap = 1 // filters fill after a new key or two: rebuilt all the time
			}
		}
		fs := vfs.NewMem()
		db, err := storage.Open("db", storage.Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		prepare := func(sm *SM) {
			setup(sm)
			if err := sm.SetIngestDir(fs, "ingest"); err != nil {
				t.Fatal(err)
			}
		}
		sm, err := New(db, 7)
		if err != nil {
			t.Fatal(err)
		}
		prepare(sm)
		r := mrand.New(mrand.NewPCG(seed, 1))
		var results []string
		var dump bytes.Buffer
		for i, runs := 0, 0; i < len(cmds); runs++ {
			// Every member's database is compared after each 250th entry.
			n := min(1+r.IntN(maxRun), len(cmds)-i, 250-i%250)
			b := db.NewIndexedBatch()
			var entries []multiraft.Entry
			for j := range n {
				data, err := Encode(cmds[i+j])
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, multiraft.Entry{Index: uint64(i + j + 1), Term: 1, Cmd: data})
			}
			if dropEvery > 0 && runs%dropEvery == dropEvery-1 {
				if _, err := sm.Apply(b, entries); err != nil {
					t.Fatal(err)
				}
				_ = b.Close()
				sm.ApplyDone(false)
				b = db.NewIndexedBatch()
			}
			out, err := sm.Apply(b, entries)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Commit(pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			sm.ApplyDone(true)
			for _, o := range out {
				results = append(results, fmt.Sprintf("%v", describeOutcome(o)))
			}
			i += n
			if reopenEvery > 0 && runs%reopenEvery == reopenEvery-1 {
				if sm, err = New(db, 7); err != nil {
					t.Fatal(err)
				}
				prepare(sm)
			}
			if i%250 == 0 || i == len(cmds) {
				fmt.Fprintf(&dump, "after entry %d:\n", i)
				if err := scan(db, sm.k.prefix, func(k, v []byte) error {
					fmt.Fprintf(&dump, "%x=%x\n", k, v)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return dump.String(), results
	}
	// The reference: one entry per run, no row cache, no key filters.
	want, wantResults := run(1, 0, 1, 0, 0, 0, 0)
	const filters = DefaultKeyFilterBytes
	for _, c := range []struct {
		maxRun, reopen      int
		rowCache            int64
		drop                int
		filters, filterKeys int64
	}{
		{1, 0, DefaultRowCacheBytes, 0, 0, 0},
		{64, 0, DefaultRowCacheBytes, 0, filters, 0},
		{7, 0, 0, 0, 0, 0},
		{7, 0, 0, 0, filters, 0}, // filters alone: every look they pass reads the database
		{32, 5, DefaultRowCacheBytes, 0, filters, 0},
		{16, 0, DefaultRowCacheBytes, 3, filters, 0}, // dropped batches
		{16, 7, 2 << 10, 4, filters, 0},              // a cache of a few rows: evicting all the time
		{1, 0, 300, 0, 0, 0},                         // a cache smaller than one row
		{3, 0, 0, 2, 100, 0},                         // filter memory for one bucket at a time
		{5, 0, 0, 0, filters, 6},                     // buckets of more than 6 tuples have none
		{9, 0, 0, 3, filters, 1},                     // filters sized for a key or two, rebuilt as they fill
	} {
		what := fmt.Sprintf("runs of up to %d entries (reopen every %d, row cache %d bytes, a dropped batch every %d runs, key filters %d bytes, filter setting %d)",
			c.maxRun, c.reopen, c.rowCache, c.drop, c.filters, c.filterKeys)
		got, results := run(c.maxRun, c.reopen, uint64(c.maxRun), c.rowCache, c.drop, c.filters, c.filterKeys)
		if got != want {
			t.Fatalf("%s: the database differs from one entry per run without a row cache", what)
		}
		for i := range results {
			// A table ingested by a dropped batch is durable: applied
			// again, it finds its rows there and answers that it copied
			// none (the copied mark counts them again; copy_files.go).
			if fixtureCopyTables && c.drop > 0 && strings.HasPrefix(results[i], "copy ") {
				continue
			}
			if results[i] != wantResults[i] {
				t.Fatalf("%s: entry %d answered %s, want %s", what, i+1, results[i], wantResults[i])
			}
		}
	}
	all := fmt.Sprint(wantResults)
	for _, s := range []string{"duplicate", "set bucket changed true refused <nil> deleted map[1:", "copy 1 map[1:1]", "CODE_DUPLICATE_KEY"} {
		if !bytes.Contains([]byte(all), []byte(s)) {
			t.Fatalf("no answer has %q: the log does not test what it should", s)
		}
	}
}

func describeOutcome(o any) string {
	r, ok := o.(Result)
	if !ok {
		return fmt.Sprintf("%T %v", o, o)
	}
	var s []string
	if r.Err != nil {
		s = append(s, fmt.Sprintf("err %v", r.Err))
	}
	if v := r.Batch; v != nil {
		b := fmt.Sprintf("index %d refusal %v", v.Result.GetIndex(), v.Result.GetRefusal().GetCode())
		if v.Duplicate {
			b += " duplicate"
		}
		for _, r := range v.Result.GetResults() {
			tp, _ := tuple.DecodeTuple(r.GetTuple())
			b += fmt.Sprintf(" [%v %v %d]", r.GetFound(), tp, r.GetVersion())
		}
		s = append(s, b)
	}
	for _, v := range r.Steps {
		s = append(s, fmt.Sprintf("set bucket changed %v refused %v deleted %v", v.Changed, v.Refused, v.Deleted))
	}
	for _, v := range r.Copies {
		s = append(s, fmt.Sprintf("copy %d %v refused %v", v.Copied, v.BySpace, v.Refused))
	}
	s = append(s, fmt.Sprintf("schema %d buckets created %d", r.Schema.Version, r.Buckets.Created))
	return strings.Join(s, "; ")
}

// The window's has, asked by a leader outside the apply loop (refuseFrozen),
// never misses an id: a reload whose scan fails leaves the window as it
// was, and has may run while the apply loop adds and forgets ids (the race
// detector checks the locking).
func TestTheRequestWindowIsNeverSmallerToItsReaders(t *testing.T) {
	var w requestWindow
	id := []byte("0123456789abcdef")
	if err := w.load(func(add func([]byte, requestStamp, []byte), _ func(*copiedRecord)) error {
		add(id, requestStamp{ms: 5}, nil)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	failed := errors.New("scan failed")
	if err := w.load(func(add func([]byte, requestStamp, []byte), _ func(*copiedRecord)) error {
		add([]byte("fedcba9876543210"), requestStamp{ms: 6}, nil)
		return failed
	}); !errors.Is(err, failed) {
		t.Fatalf("a failed reload: %v, want its error", err)
	}
	if !w.has(0, id) || w.has(0, []byte("fedcba9876543210")) {
		t.Fatalf("after a failed reload: has(old) %v, has(half-loaded) %v; want true, false", w.has(0, id), w.has(0, []byte("fedcba9876543210")))
	}

	f := newFixture(t)
	f.setup()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 2000; i++ {
			f.sm.reqs.has(1, id)
		}
	}()
	for i := range 50 {
		f.ok(&rspb.Batch{RequestId: fmt.Appendf(nil, "%016d", i), Bucket: 5, Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint(i), 1))}})
		f.now += int64(RequestIDWindow / 10 / 1e6) // ids leave the window as it goes
	}
	<-done
}

// ofBuckets reads a bucket's ids from the window's index by bucket: it
// gives exactly the ids a walk of the whole window finds for the buckets
// asked, in the order they were written, while the window adds ids,
// forgets the oldest and drops its queue's blocks (which moves the positions
// the index holds), and after a reload. The results it hands out with them
// are those added with each, as long as the window had room for them: it
// keeps no more than its limit, counts what its blocks hold, and keeps
// results again once dropped blocks have made room.
func TestTheWindowGivesABucketsIdsFromItsIndex(t *testing.T) {
	w := requestWindow{keepLimit: 150_000}
	if err := w.load(func(func([]byte, requestStamp, []byte), func(*copiedRecord)) error { return nil }); err != nil {
		t.Fatal(err)
	}
	type added struct {
		id string
		ms int64
	}
	results := map[added][]byte{}
	held := func() (n int) {
		for _, r := range w.order.results {
			n += len(r)
		}
		for _, r := range w.odd.results {
			n += len(r)
		}
		return n
	}
	var kept, notKept, keptAfterRefusal int
	walk := func(buckets map[uint32]bool) map[uint32][]rememberedID {
		out := map[uint32][]rememberedID{}
		w.order.each(func(s *stampedID[requestKey]) {
			if buckets[s.bucket] && w.at[s.id] == s.requestStamp {
				out[s.bucket] = append(out[s.bucket], rememberedID{id: append([]byte(nil), s.id[:]...), ms: s.ms, rev: s.rev})
			}
		})
		w.odd.each(func(s *stampedID[string]) {
			if buckets[s.bucket] && w.other[s.id] == s.requestStamp {
				out[s.bucket] = append(out[s.bucket], rememberedID{id: []byte(s.id), ms: s.ms, rev: s.rev})
			}
		})
		return out
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	asked := map[uint32]bool{1: true, 3: true, 4: true}
	dropped := 0
	for ms := int64(1); ms <= 400; ms++ {
		for range 40 {
			id := fmt.Appendf(nil, "%016d", rng.IntN(6000)) // some written again: the older stamp is no longer the id's
			if rng.IntN(50) == 0 {
				id = fmt.Appendf(nil, "odd-%d", rng.IntN(100)) // of another length
			}
			res := fmt.Appendf(nil, "result of %s at %d", id, ms)
			results[added{string(id), ms}] = res
			w.add(id, requestStamp{ms: ms, bucket: uint32(1 + rng.IntN(5)), rev: uint64(ms)}, res)
		}
		base := w.order.base
		w.forget(ms - 50)
		if w.order.base != base {
			dropped++
		}
		rems, want := w.ofBuckets(asked), walk(asked)
		got := map[uint32][]rememberedID{}
		for b, rem := range rems {
			ids := rem.ids
			for i, r := range ids {
				switch {
				case r.result == nil:
					notKept++
				case !bytes.Equal(r.result, results[added{string(r.id), r.ms}]):
					t.Fatalf("at ms %d: id %s of %d came with the result %q, added with %q", ms, r.id, r.ms, r.result, results[added{string(r.id), r.ms}])
				case notKept > 0:
					keptAfterRefusal++
					fallthrough
				default:
					kept++
				}
				ids[i].result = nil
			}
			got[b] = ids
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("at ms %d: ofBuckets gave %v,\nthe window holds %v", ms, got, want)
		}
		if h := held(); w.kept != h || w.kept > w.keepLimit {
			t.Fatalf("at ms %d: the window counts %d bytes of results kept, its blocks hold %d; the limit is %d", ms, w.kept, h, w.keepLimit)
		}
	}
	if dropped == 0 {
		t.Fatal("no block of the queue was ever dropped: the test does not test the index's positions")
	}
	if kept == 0 || notKept == 0 || keptAfterRefusal == 0 {
		t.Fatalf("results handed out kept %d, not kept %d, kept again after the window was full %d: the limit was never reached, or never made room", kept, notKept, keptAfterRefusal)
	}
	if err := w.load(func(add func([]byte, requestStamp, []byte), _ func(*copiedRecord)) error {
		add(fmt.Appendf(nil, "%016d", 1), requestStamp{ms: 500, bucket: 3}, []byte("a result"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := w.ofBuckets(asked); len(got) != 1 || len(got[3].ids) != 1 || got[3].ids[0].ms != 500 || string(got[3].ids[0].result) != "a result" || w.kept != len("a result") {
		t.Fatalf("after a reload ofBuckets gave %v (%d bytes of results kept), want the one id of bucket 3 with its result", got, w.kept)
	}
}

// resultStamp reads a stored BatchResult's bucket and revision as the
// generated decoder does, from any bytes the decoder takes: every stored
// result a copy keeps as bytes was decoded whole once (checkCopiedRequests).
func FuzzResultStampAgreesWithTheDecoder(f *testing.F) {
	for _, r := range []*rspb.BatchResult{
		{},
		{Bucket: 7, Revision: 3},
		{Index: 12, Bucket: 1 << 31, Revision: 1 << 40, Results: []*rspb.OpResult{{Tuple: []byte("a tuple")}, {}}},
		{Refusal: &rspb.Refusal{Code: rspb.Refusal_CODE_DUPLICATE_KEY, Message: "duplicate key"}, Bucket: 2},
	} {
		v, err := r.MarshalVT()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
		f.Add(append(v, 0x20, 0x09)) // the bucket again: the last one counts
	}
	f.Add([]byte{0x20})                   // a tag with no value
	f.Add([]byte{0x22, 0x01, 0x05})       // field 4 as bytes: not the bucket
	f.Add([]byte{0x98, 0x06, 0x01, 0x28}) // an unknown varint field, then field 5 cut short
	f.Fuzz(func(t *testing.T, v []byte) {
		bucket, rev, err := resultStamp(v)
		want := &rspb.BatchResult{}
		if werr := want.UnmarshalVT(v); werr != nil {
			return // the leader refuses it; apply never sees it
		}
		if err != nil || bucket != want.GetBucket() || rev != want.GetRevision() {
			t.Fatalf("resultStamp(%x) = %d, %d, %v; the decoder reads bucket %d, revision %d", v, bucket, rev, err, want.GetBucket(), want.GetRevision())
		}
	})
}

// eventStamp reads a stored Event's bucket and revision as the generated
// decoder does, from any bytes the decoder takes (checkCopied decodes a
// copied event whole once).
func FuzzEventStampAgreesWithTheDecoder(f *testing.F) {
	for _, ev := range []*rspb.Event{
		{},
		{Bucket: 7, Revision: 3},
		{Bucket: 1 << 31, Revision: 1 << 40, TimeUnixMs: 1764000000000, Ops: []*rspb.EventOp{{SpaceId: 512, Key: []byte("k"), Tuple: []byte("t"), Version: 2}, {}}},
	} {
		v, err := ev.MarshalVT()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
		f.Add(append(v, 0x10, 0x09)) // the revision again: the last one counts
	}
	f.Add([]byte{0x08})       // a tag with no value
	f.Add([]byte{0x12, 0x01}) // field 2 as bytes, cut short
	f.Fuzz(func(t *testing.T, v []byte) {
		bucket, rev, err := eventStamp(v)
		want := &rspb.Event{}
		if werr := want.UnmarshalVT(v); werr != nil {
			return // the leader refuses it; apply never sees it
		}
		if err != nil || bucket != want.GetBucket() || rev != want.GetRevision() {
			t.Fatalf("eventStamp(%x) = %d, %d, %v; the decoder reads bucket %d, revision %d", v, bucket, rev, err, want.GetBucket(), want.GetRevision())
		}
	})
}
