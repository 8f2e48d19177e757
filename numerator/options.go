package numerator

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/shardkit/shardkit/sharding"
)

// Options are a run's parameters (N8).
type Options struct {
	// StateType is T of the state version (--state-type).
	StateType uint32
	// Scheme places offers on shards (--output-sharding-scheme).
	Scheme sharding.Scheme
	// TTL: a key absent for more than TTL runs expires and frees its id.
	TTL uint64
	// ForceRebuild renumbers every shard densely from 0 (N4). It is also the
	// only way to accept an input state of another type or scheme.
	ForceRebuild bool
	// RebuildThreshold: a shard whose hole ratio after a plain run would
	// exceed it is rebuilt instead. 0 means DefaultRebuildThreshold; a value
	// >= 1 disables automatic rebuilds.
	RebuildThreshold float64
	// RebuildMinDocs: shards with fewer ids never rebuild automatically, so
	// tiny shards do not flip on a hole or two. 0 means none are exempt.
	RebuildMinDocs int64
	// AllowDropFraction: a run whose offers lack more than this share of
	// the docs the previous generation had (of every doc of the input
	// state, when that generation had none) is refused with
	// ErrTooManyDropped before anything is written: an incomplete input
	// must not free, after TTL runs, the ids of the offers it lost. 0 means
	// DefaultAllowDropFraction; >= 1 accepts any drop.
	AllowDropFraction float64
	// AllowEmpty accepts an offers table without rows, which is refused
	// otherwise (ErrEmptyInput); it also accepts that such a run drops
	// every doc.
	AllowEmpty bool
	// RenumberFraction: a plain run that expires more than this share of
	// its input state's docs bumps V (and resets G) as a rebuild does:
	// most of the id space is freed at once and will be given to other
	// keys, so data built on the old state must not be used with the new
	// one (N6). 0 means DefaultRenumberFraction; >= 1 never.
	RenumberFraction float64
	// MemoryLimit bounds the bytes of rows held in memory; past it, shards
	// spill sorted runs to TempDir. 0 means DefaultMemoryLimit.
	MemoryLimit int64
	// TempDir holds spill files; "" means os.TempDir().
	TempDir string
	// Workers is how many shards are processed at once; 0 means GOMAXPROCS.
	Workers int
	// Logger receives what the run did; nil discards.
	Logger *slog.Logger
	// Progress, if set, is told where the run is: when each phase
	// (PhaseLoad, PhasePlan, PhaseWrite) begins and ends, and every
	// ProgressEvery in between, from another goroutine (never two calls at
	// once).
	Progress func(Progress)
	// ProgressEvery: 0 means a second.
	ProgressEvery time.Duration
}

// Defaults of Options.
const (
	DefaultRebuildThreshold  = 0.2
	DefaultAllowDropFraction = 0.5
	DefaultRenumberFraction  = 0.5
	DefaultMemoryLimit       = 1 << 30
)

func (o Options) withDefaults() (Options, error) {
	if err := o.Scheme.Validate(); err != nil {
		return o, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	if o.RebuildThreshold < 0 {
		return o, fmt.Errorf("%w: rebuild threshold %v is negative; use a ratio in (0, 1)", ErrBadOptions, o.RebuildThreshold)
	}
	if o.RebuildThreshold == 0 {
		o.RebuildThreshold = DefaultRebuildThreshold
	}
	if o.AllowDropFraction < 0 || o.RenumberFraction < 0 {
		return o, fmt.Errorf("%w: allowed drop fraction %v or renumber fraction %v is negative; use a share in (0, 1]", ErrBadOptions, o.AllowDropFraction, o.RenumberFraction)
	}
	if o.AllowDropFraction == 0 {
		o.AllowDropFraction = DefaultAllowDropFraction
	}
	if o.RenumberFraction == 0 {
		o.RenumberFraction = DefaultRenumberFraction
	}
	if o.MemoryLimit < 0 {
		return o, fmt.Errorf("%w: memory limit %d is negative", ErrBadOptions, o.MemoryLimit)
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// StateMeta is what a state carries besides its rows: it is stored in the
// key-value metadata of every part file of the state.
type StateMeta struct {
	Version        Version
	Run            uint64 // runs so far; rows seen in the last run have last_seen_run == Run
	TTL            uint64 // the TTL the state was built with
	SchemeName     string
	Shards         uint32
	LastRebuildRun uint64 // the run of the last rebuild (V bump)
}
