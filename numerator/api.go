package numerator

import (
	"context"
	"fmt"
	"math"

	"github.com/apache/arrow-go/v18/arrow"
)

// Tables are a run's locations (N8). Each table is a Parquet file or a
// directory of part files; outputs are written as directories with one part
// file per shard.
type Tables struct {
	InputState  string // "" for the first run: every offer is new
	InputOffers string
	OutputState string
	NewDocs     string // "" to skip the intermediate new-docs table
	ExpiredDocs string // "" to skip the intermediate expired-docs table
}

// Run is one numerator run: it reads the input state and offers, writes the
// new state (and the intermediate tables), and returns what it did. Inputs
// are checked (columns, types, metadata, version) before anything is
// written; on any error nothing is left at the output locations.
func Run(ctx context.Context, t Tables, o Options) (Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Result{}, err
	}
	if t.InputOffers == "" || t.OutputState == "" {
		return Result{}, fmt.Errorf("%w: input offers and output state are required", ErrBadOptions)
	}
	// A dead run's leftovers next to this run's outputs and in its temp
	// directory go first (they cannot belong to a live run).
	cleaned, err := cleanLeftovers(t, o)
	if err != nil {
		o.Logger.Warn("removing a dead run's leftovers", "err", err)
	}
	for _, p := range cleaned {
		o.Logger.Info("removed a dead run's leftovers", "path", p)
	}
	var prev *StateMeta
	var state rowSource
	if t.InputState != "" {
		st, meta, err := openState(t.InputState)
		if err != nil {
			return Result{}, err
		}
		prev, state = &meta, st
		if err := checkCompatible(o, prev); err != nil {
			return Result{}, err
		}
	}
	offers, err := openOffers(t.InputOffers)
	if err != nil {
		return Result{}, err
	}
	out, err := newDirOutputs(t.OutputState, t.NewDocs, t.ExpiredDocs)
	if err != nil {
		return Result{}, err
	}
	res, err := execute(ctx, o, prev, state, offers, out)
	res.Cleaned = cleaned
	return res, err
}

// ReadStateMeta reads a state's version, run counter, TTL and scheme.
func ReadStateMeta(path string) (StateMeta, error) {
	_, m, err := openState(path)
	return m, err
}

// Inspection describes a stored state.
type Inspection struct {
	Meta   StateMeta
	Shards []ShardStats // Docs, MaxDocID, Holes per shard
}

// Inspect reads a state and reports its version and, per shard, its size,
// max doc_id and holes.
func Inspect(ctx context.Context, path string) (Inspection, error) {
	t, m, err := openState(path)
	if err != nil {
		return Inspection{}, err
	}
	in := Inspection{Meta: m, Shards: make([]ShardStats, m.Shards)}
	for i := range in.Shards {
		in.Shards[i] = ShardStats{Shard: uint32(i), MaxDocID: -1}
	}
	var shard, doc []uint64
	for _, pp := range t.parts {
		p, err := openPart(pp, []string{colShardID, colDocID})
		if err != nil {
			return in, err
		}
		err = p.scan(ctx, func(rec arrow.RecordBatch) error {
			cols, err := columnsOf(rec, []string{colShardID, colDocID})
			if err != nil {
				return err
			}
			if shard, err = uints(cols[0], colShardID, uint64(m.Shards-1), shard); err != nil {
				return err
			}
			if doc, err = uints(cols[1], colDocID, math.MaxUint32, doc); err != nil {
				return err
			}
			for i, sh := range shard {
				s := &in.Shards[sh]
				s.Docs++
				s.MaxDocID = max(s.MaxDocID, int64(doc[i]))
			}
			return nil
		})
		_ = p.close()
		if err != nil {
			return in, fmt.Errorf("%s: %w", pp, err)
		}
	}
	for i := range in.Shards {
		s := &in.Shards[i]
		s.Holes = s.MaxDocID + 1 - s.Docs
		if s.Holes < 0 {
			return in, fmt.Errorf("%w: shard %d has %d rows but max doc_id %d: doc_ids repeat", ErrBadState, i, s.Docs, s.MaxDocID)
		}
	}
	return in, nil
}
