package storage

import (
	"fmt"
	"log/slog"

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
	}
	// Bloom filters on every level: point lookups of absent keys (every
	// insert checks that its key is new) then skip tables without reading them.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("storage: open pebble in %s: %w", dir, err)
	}
	return db, nil
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
