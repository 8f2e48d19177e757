package numerator

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Result describes a run.
type Result struct {
	Previous *StateMeta // nil when the run started without a state
	State    StateMeta
	Shards   []ShardStats
	Offers   int64 // distinct input offers
	Docs     int64 // rows of the output state
	New      int64
	Reused   int64
	Expired  int64
	Rebuilt  int // shards rebuilt
	Spills   int // sorted runs written to disk
	// Renumbered: the run expired more than Options.RenumberFraction of its
	// input state's docs, so V was bumped although no shard was rebuilt.
	Renumbered bool
	// Cleaned lists the leftovers of dead runs that this run removed
	// before it started: working directories next to its outputs and spill
	// directories in its temp directory.
	Cleaned []string
}

// rowSource is a table read as batches of records. Offer batches carry keys
// only; state batches carry shard, doc and last_seen_run too. A batch is
// only valid during the call.
type rowSource interface {
	scan(ctx context.Context, fn func(batch []record) error) error
	// rowCount is how many rows the table claims (a hint for sizing).
	rowCount() int64
}

// outputs receives a run's tables. Nothing is visible at the final
// locations before commit, nor after a commit that failed; abort removes
// everything written.
type outputs interface {
	openShard(shard uint32, meta StateMeta) (shardWriter, error)
	commit() error
	abort() error
}

type shardWriter interface {
	shardSink
	close() error
}

// execute is a whole run: check the input state, partition and sort both
// tables by shard, plan every shard, fix the new version, then emit.
func execute(ctx context.Context, o Options, prev *StateMeta, state rowSource, offers rowSource, out outputs) (res Result, err error) {
	defer func() {
		if err != nil {
			_ = out.abort()
		}
	}()
	if err := checkCompatible(o, prev); err != nil {
		return res, err
	}
	empty := offers.rowCount() == 0
	if empty && !o.AllowEmpty {
		return res, fmt.Errorf("%w: the input offers have no rows, so this generation would drop every doc (and their ids would be given to other offers after TTL runs); check the input, or pass --allow-empty if this generation really has no offers",
			ErrEmptyInput)
	}
	res.Previous = prev
	run, rebuildAll, reshard := uint64(1), true, false
	if prev != nil {
		run = prev.Run + 1
		rebuildAll = o.ForceRebuild
		reshard = !sameScheme(o, prev)
	}

	progress := newTracker(o.Progress, o.ProgressEvery)
	defer func() { progress.finish(err == nil) }()
	p := newPool(o, progress)
	defer func() {
		if rerr := p.release(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	if err := p.load(ctx, state, offers, reshard); err != nil {
		return res, err
	}
	res.Spills = p.spills

	params := make([]shardParams, o.Scheme.Shards)
	plans := make([]*plan, o.Scheme.Shards)
	drops := make([]dropCounts, o.Scheme.Shards)
	expired := make([]int64, o.Scheme.Shards)
	var anyNew, anyRebuild atomic.Bool
	for sh := range params {
		params[sh] = shardParams{
			shard: uint32(sh), run: run, ttl: o.TTL, force: rebuildAll,
			threshold: o.RebuildThreshold, minDocs: o.RebuildMinDocs, progress: progress,
		}
	}
	if !rebuildAll || prev != nil {
		progress.begin(PhasePlan, p.allRows())
	}
	if !rebuildAll {
		err := forEachShard(ctx, o.Workers, len(params), func(sh int) error {
			pl, err := planShard(params[sh], p.stateSource(sh), p.offers[sh].source())
			if err != nil {
				return err
			}
			plans[sh], drops[sh], expired[sh] = pl, pl.drops, pl.expired
			if pl.newKeys > 0 {
				anyNew.Store(true)
			}
			if pl.wantsRebuild(params[sh]) {
				anyRebuild.Store(true)
				params[sh].force = true
				plans[sh] = nil
			}
			return nil
		})
		if err != nil {
			return res, err
		}
	} else if prev != nil {
		err := forEachShard(ctx, o.Workers, len(params), func(sh int) error {
			var err error
			drops[sh], err = countDrops(params[sh], p.stateSource(sh), p.offers[sh].source())
			return err
		})
		if err != nil {
			return res, err
		}
	}
	var total dropCounts
	var totalExpired int64
	for sh := range drops {
		total.merge(drops[sh])
		totalExpired += expired[sh]
	}
	if prev != nil && (!empty || !o.AllowEmpty) {
		if err := checkDrops(o, prev.Run, total); err != nil {
			return res, err
		}
	}
	// A plain run that frees most of the id space renumbers in effect:
	// the freed ids go to other keys, so it bumps V as a rebuild does.
	res.Renumbered = prev != nil && !rebuildAll && o.RenumberFraction < 1 && total.rows > 0 &&
		float64(totalExpired) > o.RenumberFraction*float64(total.rows)

	meta := StateMeta{Run: run, TTL: o.TTL, SchemeName: o.Scheme.Name, Shards: o.Scheme.Shards,
		Version: Version{Type: o.StateType, Scheme: o.Scheme.ID}}
	switch {
	case prev == nil:
		meta.LastRebuildRun = run
	case rebuildAll || anyRebuild.Load() || res.Renumbered:
		meta.Version.Rebuild = prev.Version.Rebuild + 1
		meta.LastRebuildRun = run
	default:
		meta.Version.Rebuild, meta.Version.Generation = prev.Version.Rebuild, prev.Version.Generation
		meta.LastRebuildRun = prev.LastRebuildRun
		if anyNew.Load() {
			meta.Version.Generation++
		}
	}

	res.Shards = make([]ShardStats, o.Scheme.Shards)
	progress.begin(PhaseWrite, p.allRows())
	err = forEachShard(ctx, o.Workers, len(params), func(sh int) error {
		w, err := out.openShard(uint32(sh), meta)
		if err != nil {
			return err
		}
		state, offers := p.stateSource(sh), p.offers[sh].source()
		var st ShardStats
		if plans[sh] != nil {
			st, err = emitPlain(params[sh], state, offers, plans[sh], w)
		} else {
			st, err = emitRebuild(params[sh], state, offers, w)
		}
		plans[sh] = nil
		if cerr := w.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		res.Shards[sh] = st
		return p.releaseShard(sh)
	})
	if err != nil {
		return res, err
	}
	for _, st := range res.Shards {
		res.Offers += st.Offers
		res.Docs += st.Docs
		res.New += st.New
		res.Reused += st.Reused
		res.Expired += st.Expired
		if st.Rebuilt {
			res.Rebuilt++
		}
	}
	if err := out.commit(); err != nil {
		return res, err
	}
	res.State = meta
	o.Logger.Info("numerator run done", "version", meta.Version.String(), "run", run,
		"offers", res.Offers, "docs", res.Docs, "new", res.New, "reused", res.Reused,
		"expired", res.Expired, "rebuilt_shards", res.Rebuilt, "renumbered", res.Renumbered, "spills", res.Spills)
	return res, nil
}

// checkDrops refuses offers that lack more than the allowed share of the
// docs the previous generation had (of every doc of the state, when that
// generation had none: a run after an allowed empty one).
func checkDrops(o Options, prevRun uint64, d dropCounts) error {
	live, dropped, what := d.live, d.dropped, fmt.Sprintf("that the previous generation (run %d) had", prevRun)
	if live == 0 {
		live, dropped, what = d.rows, d.absent, "of the input state"
	}
	if live == 0 || o.AllowDropFraction >= 1 || float64(dropped) <= o.AllowDropFraction*float64(live) {
		return nil
	}
	share := float64(dropped) / float64(live)
	return fmt.Errorf("%w: the input offers lack %d of the %d docs %s (%.1f%%, more than the %.1f%% allowed); check that the input is complete, or pass --allow-drop-fraction %.3f or more (1 accepts any drop) if these offers are really gone",
		ErrTooManyDropped, dropped, live, what, 100*share, 100*o.AllowDropFraction, math.Ceil(share*1000)/1000)
}

// checkCompatible refuses an input state of another type or scheme unless
// the run rebuilds (N6).
func checkCompatible(o Options, prev *StateMeta) error {
	if prev == nil || o.ForceRebuild {
		return nil
	}
	if prev.Version.Type != o.StateType {
		return fmt.Errorf("%w: the input state is of type %d (version %s), the run was asked for type %d; pass the state's type, or --rebuild-state-force to renumber",
			ErrIncompatibleState, prev.Version.Type, prev.Version, o.StateType)
	}
	if prev.Version.Scheme != o.Scheme.ID {
		return fmt.Errorf("%w: the input state is placed by sharding scheme %d (version %s), the run was asked for scheme %s; pass --rebuild-state-force to re-place every offer under the new scheme",
			ErrIncompatibleState, prev.Version.Scheme, prev.Version, o.Scheme)
	}
	if prev.SchemeName != o.Scheme.Name {
		return fmt.Errorf("%w: the input state says scheme %d is named %q, this binary's scheme %s is named %q; the schemes differ, check the registry, or pass --rebuild-state-force to re-place every offer under this binary's scheme",
			ErrBadState, prev.Version.Scheme, prev.SchemeName, o.Scheme, o.Scheme.Name)
	}
	if prev.Shards != o.Scheme.Shards {
		return fmt.Errorf("%w: the input state says scheme %d has %d shards, this binary's scheme %s has %d; the schemes differ, check the registry",
			ErrBadState, prev.Version.Scheme, prev.Shards, o.Scheme, o.Scheme.Shards)
	}
	return nil
}

// sameScheme reports whether prev was placed by the run's scheme: same id,
// name and shard count. Otherwise (a forced run) every offer is re-placed.
func sameScheme(o Options, prev *StateMeta) bool {
	return prev.Version.Scheme == o.Scheme.ID && prev.SchemeName == o.Scheme.Name && prev.Shards == o.Scheme.Shards
}

// forEachShard calls fn for shards 0..n-1 on at most workers goroutines.
func forEachShard(ctx context.Context, workers, n int, fn func(sh int) error) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for sh := range n {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fn(sh)
		})
	}
	return g.Wait()
}
