package replicaset

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// BenchmarkCopyTablesUnderWrites copies buckets in as tables while they
// are written, as a destination does under a closed-loop write load:
// before each copy entry a write lands in some of its buckets (every
// one, one in ten, none), the leader builds the entry's tables from the
// database as it then is, and the entry applies; meanwhile another
// goroutine commits 2 MB/s of other keys into the same database (the raft
// logs and the other groups' applies). It reports Pebble's write stalls
// (storage.Options.OnWriteStall: every commit of the database waited
// meanwhile), the ingests that overlapped the memtable (Pebble's
// flushable ingests, each a memtable rotation) and the CPU per tuple
// (the leader's tables, the applies and the other writer's, together).
func BenchmarkCopyTablesUnderWrites(b *testing.B) {
	for _, every := range []uint32{1, 10, 0} {
		name := "none written"
		if every > 0 {
			name = fmt.Sprintf("one bucket in %d written", every)
		}
		b.Run(name, func(b *testing.B) { benchCopyUnderWrites(b, every) })
	}
}

func benchCopyUnderWrites(b *testing.B, every uint32) {
	b.Helper()
	dir := b.TempDir()
	var stalls, memStalls atomic.Int64
	var stalled atomic.Int64 // ns
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{OnWriteStall: func(reason string, took time.Duration) {
		stalls.Add(1)
		if reason == "memtable count limit reached" {
			memStalls.Add(1)
		}
		stalled.Add(int64(took))
	}})
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
	apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{benchSpace()}}}})
	var steps []*rspb.Command
	for bk := uint32(1); bk <= buckets; bk++ {
		steps = append(steps, &rspb.Command{Op: &rspb.Command_SetBuckets{SetBuckets: &rspb.SetBuckets{Steps: []*rspb.SetBucket{{Bucket: bk, State: rspb.BucketState_STATE_RECEIVING, Generation: 2, Peer: "r1"}}}}})
	}
	apply(steps...)
	entries := copyEntries(b.N, copyPerTables)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		val := make([]byte, 256)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			batch := db.NewBatch()
			for i := range 8 {
				_ = batch.Set(fmt.Appendf(nil, "zz/%012d", n*8+i), val, nil)
			}
			_ = batch.Commit(pebble.NoSync)
			_ = batch.Close()
		}
	})
	m0 := db.Metrics()
	cpu0, ok := processCPU()
	b.ResetTimer()
	for _, e := range entries {
		cc := e.GetCopyChunks()
		// The clients' writes into the entry's buckets: a key in the
		// middle of the bucket's (the prev window: the bucket is the
		// destination's, its copy not yet complete).
		var ws []*rspb.Command
		for _, ch := range cc.GetChunks() {
			bk := ch.GetBucket()
			if every == 0 || bk%every != 0 {
				continue
			}
			mid := ch.GetTuples()[len(ch.GetTuples())/2]
			ws = append(ws, &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: bk, SchemaVersion: 1, PrevGeneration: 2, Ops: []*rspb.Op{{
				Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: mid.GetKey(), Prev: &rspb.PrevFact{Found: true, Version: mid.GetVersion(), Tuple: mid.GetTuple()},
				Tuple: mid.GetTuple(),
			}}}}})
		}
		if len(ws) > 0 {
			apply(ws...)
		}
		if cc.Tables, cc.Summaries, err = sm.CopyTables(db, cc.GetChunks()); err != nil {
			b.Fatal(err)
		}
		apply(e)
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	m1 := db.Metrics()
	if cpu1, ok1 := processCPU(); ok && ok1 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(float64(stalls.Load()), "stalls")
	b.ReportMetric(float64(memStalls.Load()), "memtable-stalls")
	b.ReportMetric(float64(time.Duration(stalled.Load()).Milliseconds()), "stalled-ms")
	b.ReportMetric(float64(m1.Ingest.Count-m0.Ingest.Count), "ingests")
	b.ReportMetric(float64(m1.Flush.AsIngestCount-m0.Flush.AsIngestCount), "flushable-ingests")
	checkRows(b, db, sm, buckets)
}

// checkRows fails b unless the buckets hold every copied row.
func checkRows(b *testing.B, db *pebble.DB, sm *SM, buckets uint32) {
	b.Helper()
	n := 0
	for bk := uint32(1); bk <= buckets; bk++ {
		ts, _, err := sm.Range(db, bk, 1, KeyRange{}, 2*copyPerBucket)
		if err != nil {
			b.Fatal(err)
		}
		n += len(ts)
	}
	if want := int(buckets) * copyPerBucket; n != want {
		b.Fatalf("the buckets hold %d rows, want %d", n, want)
	}
}
