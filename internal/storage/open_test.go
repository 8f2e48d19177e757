package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestOpenWriteReopen(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, c, err := db.Get([]byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if string(v) != "v" {
		t.Fatalf("got %q after reopen, want %q", v, "v")
	}
}

// gatedFS holds the creation of every table file (a flush's output) until
// its gate is opened, so that memtables queue up behind a flush.
type gatedFS struct {
	vfs.FS
	gate chan struct{}
}

func (g gatedFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if strings.HasSuffix(name, ".sst") {
		<-g.gate
	}
	return g.FS.Create(name, c)
}

func TestAWriteStallIsReportedWithItsReasonAndLength(t *testing.T) {
	fs := gatedFS{FS: vfs.NewMem(), gate: make(chan struct{})}
	type stall struct {
		reason string
		took   time.Duration
	}
	stalls := make(chan stall, 16)
	db, err := Open("db", Options{FS: fs, MemTableBytes: 256 << 10, OnWriteStall: func(reason string, took time.Duration) {
		stalls <- stall{reason, took}
	}})
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		v := make([]byte, 32<<10)
		for i := range 64 { // 2 MiB: more than the memtables a flush may keep waiting
			if err := db.Set(fmt.Appendf(nil, "k%03d", i), v, pebble.NoSync); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	select {
	case err := <-wrote:
		t.Fatalf("64 writes of 32 KiB into 256 KiB memtables finished (err %v) with every flush held back: no stall", err)
	case <-time.After(200 * time.Millisecond): // the writes are held, as they should be
	}
	if g := ReadGauges(db); g.Memtables < 2 {
		t.Fatalf("gauges %+v while the writes are held: want the memtables waiting for the flush counted", g)
	}
	close(fs.gate)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-stalls:
		if s.reason != "memtable count limit reached" || s.took <= 0 {
			t.Fatalf("stall reported as (%q, %v), want the memtable limit and a positive length", s.reason, s.took)
		}
	default:
		t.Fatal("the writes were held back, but no stall was reported")
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// Level 0 gathers L0CompactionSublevels before it is compacted (Pebble's
// score is twice the sublevels over L0CompactionThreshold):
// the flushes below each overlap the last (the same two keys), so each is
// a sublevel of its own.
func TestLevel0IsCompactedFromItsThresholdOfSublevels(t *testing.T) {
	db, err := Open("db", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	flush := func(i int) {
		t.Helper()
		for _, k := range []string{"a", "z"} {
			if err := db.Set([]byte(k), fmt.Appendf(nil, "v%d", i), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	const trigger = L0CompactionSublevels
	for i := range trigger - 1 {
		flush(i)
	}
	// Below it no compaction is picked at all (Pebble's default of 4
	// would have compacted level 0 at its second sublevel, and again
	// within the flushes that followed).
	if m := db.Metrics(); m.Levels[0].Sublevels != trigger-1 || m.Compact.Count != 0 {
		t.Fatalf("after %d overlapping flushes: %d sublevels in level 0 and %d compactions, want %d and none",
			trigger-1, m.Levels[0].Sublevels, m.Compact.Count, trigger-1)
	}
	flush(trigger)
	deadline := time.Now().Add(10 * time.Second)
	for db.Metrics().Levels[0].Sublevels >= trigger {
		if time.Now().After(deadline) {
			t.Fatalf("level 0 holds %d sublevels 10 s after a flush brought it to %d: not compacted", db.Metrics().Levels[0].Sublevels, trigger)
		}
		time.Sleep(time.Millisecond)
	}
}

// ReadGauges counts the flushes and ingests since the database opened, and
// the tables ingested over keys in the memtable (flushables): one over a
// key written before it, none over a range the memtable has no key in.
func TestReadGaugesCountsFlushesAndIngests(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ingest := func(name, key string) {
		t.Helper()
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: db.TableFormat()})
		if err := w.Set([]byte(key), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Ingest(context.Background(), []string{name}); err != nil {
			t.Fatal(err)
		}
	}
	g0 := ReadGauges(db)
	if err := db.Set([]byte("a"), []byte("1"), pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	ingest("apart.sst", "z")   // no key of the memtable in its range
	ingest("overlap.sst", "a") // over the memtable's a
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	g := ReadGauges(db)
	if g.Ingests-g0.Ingests != 2 || g.FlushableTables-g0.FlushableTables != 1 || g.Flushes <= g0.Flushes {
		t.Fatalf("after two ingests, one over the memtable, and a flush: %+v (from %+v); want 2 ingests, 1 flushable table, a flush or more", g, g0)
	}
}
