package storage

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Options configures Open. Zero values take the defaults.
type Options struct {
	// FS is the file system (default: the OS one; tests pass vfs.NewCrashableMem()).
	FS vfs.FS
	// Logger receives Pebble's messages: its info messages at debug level.
	Logger *slog.Logger
	// CacheBytes is the block cache size (default 64 MiB).
	CacheBytes int64
	// MemTableBytes is the size of one memtable (default 32 MiB).
	MemTableBytes uint64
	// OnCorruption is told of every corruption Pebble finds, as a
	// *CorruptionError: on a read (which also returns the error) and in
	// its background work (which nobody else hears of). It must not block.
	// Nil: corruption is only logged.
	OnCorruption func(error)
	// OnWriteStall is told of every write stall when it ends: why Pebble
	// held the writes back (too many memtables waiting to be flushed, or
	// too many files in level 0 waiting to be compacted) and for how long.
	// Every commit of the database waited meanwhile. It must not block.
	// Nil: stalls are only logged, at debug level.
	OnWriteStall func(reason string, took time.Duration)
	// ReadOnly opens the database to read it only (an offline check):
	// nothing is written, the write-ahead log is replayed in memory, and
	// a database that does not exist is an error.
	ReadOnly bool
}

// L0CompactionThreshold is Pebble's setting of when level 0 is compacted
// into the level below: once its sublevels (one a flush, about) reach half
// of it, 8, where Pebble's default of 4 compacts at 2. An instance's
// database is small next to a memtable (tens to hundreds of MiB against
// 32 MiB), so the level below level 0 is the last one, and every memtable
// flushed holds keys across the whole of a replicaset's range: the
// clients' writes in every bucket, the raft log (deleted by then, but in
// the flushed file's bounds), the request ids. Each compaction of level 0
// therefore rewrites nearly all of the data below it, the rows a bucket
// move ingested as tables included. Gathering 8 flushes before one
// compaction rewrites that data a quarter as often: a rebalance of an
// idle cluster spent a quarter less CPU a moved tuple, and the clients'
// writes of a closed loop did not lose (docs/benchmarks.md, "Level 0
// compacted less often"). The price is read amplification: a read looks
// in up to that many more sublevels (a point read skips most by their
// bloom filters).
const L0CompactionThreshold = 16

// L0CompactionSublevels are the level-0 sublevels that start a compaction
// of level 0 under L0CompactionThreshold.
const L0CompactionSublevels = L0CompactionThreshold / 2

// L0StopWritesThreshold is the level-0 sublevels at which Pebble holds
// every write back until a compaction catches up (a write stall, reason
// "L0 file count limit exceeded"): four times the sublevels that start a
// compaction (Pebble's default, 12, is six times its 2).
const L0StopWritesThreshold = 32

// Open opens (creating if needed) the Pebble database in dir.
func Open(dir string, o Options) (*pebble.DB, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 32 << 20
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{
		FS:           o.FS,
		Cache:        cache,
		MemTableSize: o.MemTableBytes,
		Logger:       pebbleLogger{l: o.Logger.With("component", "pebble")},
		// Pebble's default for corruption is its logger's Fatalf: a panic
		// in whichever goroutine found it (often a compaction), which no
		// caller can recover. Corruption is reported to the owner instead.
		EventListener: corruptionListener(o),
		ReadOnly:      o.ReadOnly,
	}
	if o.ReadOnly {
		opts.ErrorIfNotExists = true
	}
	// Level 0 is compacted, and holds the writes back, later than by
	// Pebble's defaults (see the constants).
	opts.L0CompactionThreshold = L0CompactionThreshold
	opts.L0StopWritesThreshold = L0StopWritesThreshold
	// Bloom filters on every level: point lookups of absent keys (every
	// insert checks that its key is new) then skip tables without reading them.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, openError(dir, err)
	}
	return db, nil
}

// corruptionListener hands corruption to Options.OnCorruption, stalls to
// Options.OnWriteStall, and keeps Pebble's other background errors in the
// log.
func corruptionListener(o Options) *pebble.EventListener {
	log := o.Logger.With("component", "pebble")
	// Pebble pairs every WriteStallBegin with a WriteStallEnd, one stall at
	// a time, under its commit mutex.
	var stallReason string
	var stallSince time.Time
	return &pebble.EventListener{
		WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
			stallReason, stallSince = info.Reason, time.Now()
		},
		WriteStallEnd: func() {
			took := time.Since(stallSince)
			log.Debug("write stall", "reason", stallReason, "took", took)
			if o.OnWriteStall != nil {
				o.OnWriteStall(stallReason, took)
			}
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			err := &CorruptionError{Path: info.Path, Err: info.Details}
			log.Debug("corruption found", "err", err)
			if o.OnCorruption != nil {
				o.OnCorruption(err)
			}
		},
		BackgroundError: func(err error) {
			if IsDamaged(err) {
				log.Debug("background error", "err", oneLine(err.Error())) // reported by DataCorruption
				return
			}
			log.Error("background error", "err", err)
		},
	}
}

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debug(fmt.Sprintf(format, args...)) }
func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...))
}

// Fatalf must not return: see FatalError.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	fe := newFatalError(format, args...)
	p.l.Error(fe.Msg)
	panic(fe)
}

// Gauges are what leads up to a write stall (Options.OnWriteStall), as
// Pebble has them now.
type Gauges struct {
	// L0Sublevels: writes stall at L0StopWritesThreshold.
	L0Sublevels int64
	// Memtables: the one being written and those waiting to be flushed.
	Memtables int64
	// CompactionDebt is the bytes Pebble estimates it must compact to
	// bring its levels into shape.
	CompactionDebt uint64
	// Compactions under way.
	Compactions int64
	// Since the database opened: its memtables' flushes (those an ingest
	// forced too); its ingests (a bucket copy's tables, one call each);
	// and the tables ingested over keys in the memtable, as flushables,
	// each one a memtable rotated and flushed before its time
	// (docs/design/moves.md, "Why no table may overlap a held key").
	Flushes, Ingests, FlushableTables uint64
}

// ReadGauges reads the gauges of an open database.
func ReadGauges(db *pebble.DB) Gauges {
	m := db.Metrics()
	return Gauges{
		L0Sublevels:    int64(m.Levels[0].Sublevels),
		Memtables:      m.MemTable.Count,
		CompactionDebt: m.Compact.EstimatedDebt,
		Compactions:    m.Compact.NumInProgress,

		Flushes:         uint64(m.Flush.Count),
		Ingests:         m.Ingest.Count,
		FlushableTables: m.Flush.AsIngestTableCount,
	}
}
