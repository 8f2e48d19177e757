package replicaset

import (
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/tuple"
)

// BenchmarkApply measures what applying one write costs the state
// machine: the time a replicaset group's worker spends in Apply (and the
// apply batch's commit) per entry, which the engine does inside its round,
// on the leader and on every follower. Runs of 32 entries (one engine
// round's worth at a few hundred clients) are applied to a Pebble database
// on disk (as the server opens it) that already holds 64,000 rows, each
// entry a one-op write of a uniformly drawn key with a 100-byte value.
// sm=kvsm-put is the engine benchmark's state machine (read the old value,
// write the new one), the baseline of BenchmarkProposals3Nodes.
// sm=replicaset-replace is a `shardkit bench --workload replace` write
// (with a request id, as the client sends one) while no request id has
// left the window yet (the first RequestIDWindow of a run);
// sm=replicaset-replace/expiring is the same in the steady state, where
// every Apply also forgets the request ids that left the window;
// sm=replicaset-replace/no-request-id is a write without a request id (no
// lookup, nothing remembered), which shows what the ids cost;
// sm=replicaset-replace/no-row-cache is the first without the row cache
// (rowcache.go): every write reads the tuple it replaces from Pebble;
// sm=replicaset-replace/checked is the first with a check op before the
// replace, on the same key (a condition on its key field, which holds):
// what a check adds to a batch. cpu-ns/op is the process's CPU time per
// write (user and system, Pebble's goroutines included), steadier than
// ns/op on a machine shared with other load.
//
//	go test -run '^$' -bench BenchmarkApply -benchtime 100000x ./internal/replicaset/
func BenchmarkApply(b *testing.B) {
	b.Run("sm=kvsm-put", benchKVSM)
	b.Run("sm=replicaset-replace", func(b *testing.B) { benchReplace(b, RequestIDWindow, true, DefaultRowCacheBytes, false) })
	b.Run("sm=replicaset-replace/expiring", func(b *testing.B) { benchReplace(b, 100*time.Millisecond, true, DefaultRowCacheBytes, false) })
	b.Run("sm=replicaset-replace/no-request-id", func(b *testing.B) { benchReplace(b, RequestIDWindow, false, DefaultRowCacheBytes, false) })
	b.Run("sm=replicaset-replace/no-row-cache", func(b *testing.B) { benchReplace(b, RequestIDWindow, true, 0, false) })
	b.Run("sm=replicaset-replace/checked", func(b *testing.B) { benchReplace(b, RequestIDWindow, true, DefaultRowCacheBytes, true) })
}

const (
	benchRows = 64_000
	benchRun  = 32
)

func benchDB(b *testing.B) *pebble.DB {
	b.Helper()
	db, err := storage.Open(b.TempDir(), storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// applyRun applies entries as the engine does: one indexed batch, committed
// without sync (the engine's fsync is the log's).
func applyRun(b *testing.B, db *pebble.DB, sm multiraft.StateMachine, entries []multiraft.Entry) {
	b.Helper()
	batch := db.NewIndexedBatch()
	out, err := sm.Apply(batch, entries)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range results(b, out) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		if r.Batch != nil && r.Batch.Result.GetRefusal() != nil {
			b.Fatal(r.Batch.Result.GetRefusal())
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		b.Fatal(err)
	}
	if o, ok := sm.(multiraft.ApplyObserver); ok {
		o.ApplyDone(true)
	}
	_ = batch.Close()
}

// benchSpace is the space `shardkit bench` creates: an unsigned key and
// a bytes value.
func benchSpace() *metapb.Space {
	return &metapb.Space{Id: 1, Name: "bench", ShardingKey: []uint32{0}, PrimaryKey: []uint32{0}, Format: []*metapb.Field{
		{Name: "key", Type: "unsigned"}, {Name: "value", Type: "bytes"},
	}}
}

// benchEntry encodes c, stamped now, as the log's next entry.
func benchEntry(b *testing.B, index *uint64, now int64, c *rspb.Command) multiraft.Entry {
	b.Helper()
	c.NowUnixMs = now
	data, err := Encode(c)
	if err != nil {
		b.Fatal(err)
	}
	*index++
	return multiraft.Entry{Index: *index, Term: 1, Cmd: data}
}

func benchKVSM(b *testing.B) {
	db := benchDB(b)
	sm := kvsm.New(7)
	val := make([]byte, 100)
	cmd := func(k uint64) []byte {
		return kvsm.Command{Op: kvsm.OpPut, Key: fmt.Appendf(nil, "%08d", k), Value: val}.Encode()
	}
	index := uint64(10)
	var run []multiraft.Entry
	flush := func() {
		if len(run) > 0 {
			applyRun(b, db, sm, run)
			run = run[:0]
		}
	}
	add := func(c []byte) {
		index++
		run = append(run, multiraft.Entry{Index: index, Term: 1, Cmd: c})
		if len(run) == benchRun {
			flush()
		}
	}
	for k := range uint64(benchRows) {
		add(cmd(k))
	}
	flush()
	rng := mrand.New(mrand.NewPCG(1, 2))
	b.ResetTimer()
	for range b.N {
		add(cmd(rng.Uint64N(benchRows)))
	}
	flush()
}

func benchReplace(b *testing.B, window time.Duration, withIDs bool, rowCache int64, check bool) {
	b.Helper()
	db := benchDB(b)
	sm, err := New(db, 7)
	if err != nil {
		b.Fatal(err)
	}
	sm.window = window
	sm.SetRowCacheBytes(rowCache)
	def := benchSpace()
	sp, err := meta.CompileSpace(def)
	if err != nil {
		b.Fatal(err)
	}
	const buckets = 3000
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixMilli()
	index := uint64(10)
	var run []multiraft.Entry
	flush := func() {
		if len(run) > 0 {
			applyRun(b, db, sm, run)
			run = run[:0]
			now++ // a millisecond per run: about 30,000 writes/s
		}
	}
	add := func(c *rspb.Command) {
		run = append(run, benchEntry(b, &index, now, c))
		if len(run) == benchRun {
			flush()
		}
	}
	add(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{def}}}})
	add(&rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: buckets, Generation: 1}}})
	flush()
	val := make([]byte, 100)
	loaded := false // the rows are loaded: a checked write may check
	write := func(k uint64) *rspb.Command {
		key := []tuple.Value{tuple.Uint(k)}
		kb, err := tuple.AppendKey(nil, key...)
		if err != nil {
			b.Fatal(err)
		}
		bucket, err := sp.BucketOf(key, buckets)
		if err != nil {
			b.Fatal(err)
		}
		var id []byte
		if withIDs {
			id = make([]byte, 16)
			_, _ = rand.Read(id)
		}
		ops := []*rspb.Op{{
			Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: kb, Tuple: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k), tuple.Bytes(val)}),
		}}
		if check && loaded {
			ops = append([]*rspb.Op{{Kind: rspb.OpKind_OP_KIND_CHECK, SpaceId: 1, Key: kb, Conditions: []*rspb.Condition{
				{Field: 0, Compare: rspb.Compare_COMPARE_EQ, Value: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k)})},
			}}}, ops...)
		}
		return &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: bucket, SchemaVersion: 1, RequestId: id, Ops: ops}}}
	}
	for k := range uint64(benchRows) {
		add(write(k))
	}
	loaded = true
	flush()
	rng := mrand.New(mrand.NewPCG(1, 2))
	// The commands are made before the clock starts: the proposer makes
	// them, not the applier.
	cmds := make([]*rspb.Command, b.N)
	for i := range cmds {
		cmds[i] = write(rng.Uint64N(benchRows))
	}
	b.ResetTimer()
	cpu0, ok := processCPU()
	for _, c := range cmds {
		add(c)
	}
	flush()
	if cpu1, ok1 := processCPU(); ok && ok1 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkApplyCopy measures what the copy of a moving bucket costs a
// member of its destination per tuple (an op is a tuple): CopyChunks
// entries of buckets of 100 tuples each (300,000 rows in 3,000 buckets,
// as scripts/bench-moves.sh loads), as many as an entry holds (ten with
// tuples, eighty with tables; copyPerChunk, copyPerTables),
// 100-byte values, applied one entry a run as the receive proposes them,
// into buckets that are receiving and were not written meanwhile (the
// copy's cursor skips the lookups) or were (written: every key is looked
// up first; with tables, the write in each bucket ends a run of 100 rows,
// so every table's rows go through the apply batch), as tuples
// (CopyChunk.tuples) or as tables (CopyChunks.tables, built before the
// clock starts: the leader builds them once, BenchmarkCopyTables). The database is flushed before the
// clock stops, so the cost of the rows' flush is counted; cpu-ns/op is
// the process's CPU, Pebble's background work included.
//
//	go test -run '^$' -bench BenchmarkApplyCopy -benchtime 200000x ./internal/replicaset/
func BenchmarkApplyCopy(b *testing.B) {
	for _, tables := range []bool{false, true} {
		form := "tuples"
		if tables {
			form = "tables"
		}
		b.Run(form+"/fresh", func(b *testing.B) { benchCopy(b, false, tables) })
		b.Run(form+"/written", func(b *testing.B) { benchCopy(b, true, tables) })
	}
}

// BenchmarkCopyTables measures what building a copy entry's tables costs
// the destination's leader per tuple (CopyTables: the rows sorted, the
// keys it holds looked for, the tables written), entries as
// BenchmarkApplyCopy's.
func BenchmarkCopyTables(b *testing.B) {
	db := benchDB(b)
	sm, err := New(db, 7)
	if err != nil {
		b.Fatal(err)
	}
	entries := copyEntries(b.N, copyPerTables)
	cpu0, ok := processCPU()
	b.ResetTimer()
	for _, e := range entries {
		if _, _, err := sm.CopyTables(db, e.GetCopyChunks().GetChunks()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if cpu1, ok1 := processCPU(); ok && ok1 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// copyPerBucket is the tuples of a bucket; an entry holds ten buckets
// with tuples (CopyChunkTuples), eighty with tables (CopyTableTuples and
// MaxChunkBytes: 8,000 rows of about 130 bytes).
const copyPerBucket, copyPerChunk, copyPerTables = 100, 10, 80

// copyEntries makes the CopyChunks entries of n tuples (rounded up to a
// bucket) into buckets 1, 2, ..., perChunk buckets an entry: keys ascend
// within a bucket, as the source streams them.
func copyEntries(n int, perChunk uint32) []*rspb.Command {
	buckets := uint32(n/copyPerBucket + 1)
	val := make([]byte, 100)
	var entries []*rspb.Command
	k := uint64(0)
	for first := uint32(1); first <= buckets; first += perChunk {
		cc := &rspb.CopyChunks{}
		for bk := first; bk < first+perChunk && bk <= buckets; bk++ {
			ch := &rspb.CopyChunk{Bucket: bk, Generation: 2}
			for range copyPerBucket {
				kb, _ := tuple.AppendKey(nil, tuple.Uint(k))
				ch.Tuples = append(ch.Tuples, &rspb.CopiedTuple{SpaceId: 1, Key: kb, Version: k + 1,
					Tuple: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k), tuple.Bytes(val)})})
				k++
			}
			cc.Chunks = append(cc.Chunks, ch)
		}
		entries = append(entries, &rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: cc}})
	}
	return entries
}

func benchCopy(b *testing.B, written, tables bool) {
	b.Helper()
	dir := b.TempDir()
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	sm, err := New(db, 7)
	if err != nil {
		b.Fatal(err)
	}
	if err := sm.SetIngestDir(vfs.Default, filepath.Join(dir, "ingest")); err != nil {
		b.Fatal(err)
	}
	def := benchSpace()
	buckets := uint32(b.N/copyPerBucket + 1)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixMilli()
	index := uint64(10)
	apply := func(cmds ...*rspb.Command) {
		var run []multiraft.Entry
		for _, c := range cmds {
			run = append(run, benchEntry(b, &index, now, c))
		}
		applyRun(b, db, sm, run)
	}
	apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{def}}}})
	var steps []*rspb.Command
	for bk := uint32(1); bk <= buckets; bk++ {
		steps = append(steps, &rspb.Command{Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: []*rspb.SetBucket{{Bucket: bk, State: rspb.BucketState_STATE_RECEIVING, Generation: 2, Peer: "r1"}}}}})
	}
	apply(steps...)
	if written {
		// One write in each bucket (its prev fact: not found) turns its
		// copy's lookups on.
		var ws []*rspb.Command
		for bk := uint32(1); bk <= buckets; bk++ {
			kb, _ := tuple.AppendKey(nil, tuple.Uint(uint64(1)<<40+uint64(bk)))
			ws = append(ws, &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: bk, SchemaVersion: 1, PrevGeneration: 2, Ops: []*rspb.Op{{
				Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: kb, Prev: &rspb.PrevFact{},
				Tuple: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(uint64(1)<<40 + uint64(bk)), tuple.Bytes(nil)}),
			}}}}})
		}
		apply(ws...)
	}
	// The entries are made before the clock starts: the receive makes
	// them, not the applier.
	entries := copyEntries(b.N, copyPerChunk)
	if tables {
		entries = copyEntries(b.N, copyPerTables)
		for _, e := range entries {
			cc := e.GetCopyChunks()
			if cc.Tables, cc.Summaries, err = sm.CopyTables(db, cc.GetChunks()); err != nil {
				b.Fatal(err)
			}
		}
	}
	cpu0, ok := processCPU()
	b.ResetTimer()
	for _, e := range entries {
		apply(e)
	}
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if cpu1, ok1 := processCPU(); ok && ok1 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
