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
}

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
	}
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
	// L0Sublevels: writes stall at 12 (Pebble's L0StopWritesThreshold).
	L0Sublevels int64
	// Memtables: the one being written and those waiting to be flushed.
	Memtables int64
	// CompactionDebt is the bytes Pebble estimates it must compact to
	// bring its levels into shape.
	CompactionDebt uint64
	// Compactions under way.
	Compactions int64
}

// ReadGauges reads the gauges of an open database.
func ReadGauges(db *pebble.DB) Gauges {
	m := db.Metrics()
	return Gauges{
		L0Sublevels:    int64(m.Levels[0].Sublevels),
		Memtables:      m.MemTable.Count,
		CompactionDebt: m.Compact.EstimatedDebt,
		Compactions:    m.Compact.NumInProgress,
	}
}
