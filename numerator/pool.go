package numerator

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/shardkit/shardkit/numerator/internal/fsutil"
	"github.com/shardkit/shardkit/sharding"
)

// pool holds the per-shard sorters of both tables and keeps the rows held in
// memory under the budget by spilling the largest sorter.
type pool struct {
	o      Options
	state  []*sorter
	offers []*sorter
	bytes  int64 // rows held by the sorters
	spills int

	jobs     chan *spillJob
	inflight atomic.Int64 // bytes of detached records not yet written
	mu       sync.Mutex
	spillErr error
	// streamed, when set, replaces the state sorters: each shard's state is
	// read from its sorted part file.
	streamed []sortedSource
	// spillDir holds this run's spill files (made at the first spill): a
	// working directory owned by this process in TempDir, so that a dead
	// run's is recognised and removed (cleanLeftovers).
	spillDir *fsutil.Owned
	progress *tracker
}

// rows is how many rows shard sh has in all (state and offers, duplicates
// included), known once loading is done.
func (p *pool) rows(sh int) int64 {
	n := p.offers[sh].total
	if p.streamed != nil {
		return n + p.streamed[sh].count()
	}
	return n + p.state[sh].total
}

func (p *pool) allRows() int64 {
	var n int64
	for sh := range p.offers {
		n += p.rows(sh)
	}
	return n
}

// spillBase is the base name of the spill directories in TempDir.
const spillBase = "shardkit-numerator-spill"

// stateSource is shard sh's sorted state.
func (p *pool) stateSource(sh int) sortedSource {
	if p.streamed != nil {
		return p.streamed[sh]
	}
	return p.state[sh].source()
}

func newPool(o Options, progress *tracker) *pool {
	p := &pool{o: o, progress: progress, state: make([]*sorter, o.Scheme.Shards), offers: make([]*sorter, o.Scheme.Shards)}
	// A block per sorter is held while it fills: blocks take at most an
	// eighth of the budget between them.
	block := int(min(max(o.MemoryLimit/8/int64(2*o.Scheme.Shards), minSorterBlock), maxSorterBlock))
	for i := range p.state {
		p.state[i] = &sorter{blockSize: block, relayoutMax: o.MemoryLimit / 4}
		p.offers[i] = &sorter{blockSize: block, relayoutMax: o.MemoryLimit / 4}
	}
	return p
}

// load partitions the input state (by its stored shard, or by the run's
// scheme when resharding) and the offers (by the run's scheme).
func (p *pool) load(ctx context.Context, state, offers rowSource, reshard bool) (err error) {
	stop := p.startSpiller()
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()
	shards := p.o.Scheme.Shards
	// Reserve each sorter's share of the rows the footers claim (within the
	// budget), so appends do not copy the slices over and over.
	reserve := func(sorters []*sorter, rows int64) {
		per := min(rows/int64(shards)+rows/int64(shards)/16+64, p.o.MemoryLimit/(entrySize+48)/int64(shards)/2)
		for _, s := range sorters {
			before := s.bytes
			s.reserve(max(per, 0))
			p.bytes += s.bytes - before
		}
	}
	if ss, ok := state.(interface{ sortedShards(uint32) []sortedSource }); ok && !reshard && !p.o.ForceRebuild {
		p.streamed = ss.sortedShards(shards)
	}
	total := offers.rowCount()
	if state != nil && p.streamed == nil {
		reserve(p.state, state.rowCount())
		total += state.rowCount()
	}
	reserve(p.offers, offers.rowCount())
	p.progress.begin(PhaseLoad, total)
	if state != nil && p.streamed == nil {
		err := state.scan(ctx, func(batch []record) error {
			for i := range batch {
				r := batch[i]
				if err := checkKey(&r.key); err != nil {
					return fmt.Errorf("input state: %w", err)
				}
				r.hash = sharding.KeyHash(r.key)
				sh := r.shard
				if reshard {
					var err error
					if sh, err = p.o.Scheme.Shard(r.key); err != nil {
						return err
					}
				} else if sh >= shards {
					return fmt.Errorf("%w: a row has shard_id %d but the scheme has %d shards; the state is corrupt or of another scheme",
						ErrBadState, sh, shards)
				}
				p.add(p.state[sh], &r)
			}
			p.progress.add(int64(len(batch)))
			return p.fit()
		})
		if err != nil {
			return err
		}
	}
	return offers.scan(ctx, func(batch []record) error {
		for i := range batch {
			r := record{key: batch[i].key}
			if err := checkKey(&r.key); err != nil {
				return fmt.Errorf("input offers: %w", err)
			}
			r.hash = sharding.KeyHash(r.key)
			sh, err := p.o.Scheme.Shard(r.key)
			if err != nil {
				return err
			}
			p.add(p.offers[sh], &r)
		}
		p.progress.add(int64(len(batch)))
		return p.fit()
	})
}

func checkKey(k *sharding.OfferKey) error {
	if len(k.OfferID) > maxOfferIDLen {
		return fmt.Errorf("%w: offer_id of %d bytes (business_id %d); offer ids longer than %d bytes are refused",
			ErrBadInput, len(k.OfferID), k.BusinessID, maxOfferIDLen)
	}
	return nil
}

func (p *pool) add(s *sorter, r *record) {
	before := s.bytes
	s.add(r)
	p.bytes += s.bytes - before
}

// fit keeps the rows in memory within the budget: while they exceed it,
// the largest sorter's records are detached and handed to the spiller
// goroutine, which sorts and writes them while loading goes on. Records
// being spilled still count until written; with one job running and one
// queued, loading waits.
func (p *pool) fit() error {
	for p.bytes+p.inflight.Load() > p.o.MemoryLimit {
		if err := p.spillError(); err != nil {
			return err
		}
		var big *sorter
		for _, s := range append(p.state[:len(p.state):len(p.state)], p.offers...) {
			if big == nil || s.bytes > big.bytes {
				big = s
			}
		}
		if big == nil || big.bytes == 0 {
			return nil
		}
		p.bytes -= big.bytes
		p.inflight.Add(big.bytes)
		p.jobs <- big.detach()
	}
	return p.spillError()
}

func (p *pool) spillError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.spillErr
}

// startSpiller runs the spill goroutine; the returned func stops it and
// waits for it.
func (p *pool) startSpiller() func() error {
	p.jobs = make(chan *spillJob, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for j := range p.jobs {
			if p.spillError() != nil {
				p.inflight.Add(-j.bytes)
				continue
			}
			var path string
			err := p.makeSpillDir()
			if err == nil {
				path, err = j.write(p.spillDir.Path)
			}
			p.mu.Lock()
			if err != nil {
				p.spillErr = err
			} else {
				j.s.runs = append(j.s.runs, path)
				p.spills++
			}
			p.mu.Unlock()
			p.inflight.Add(-j.bytes)
		}
	})
	return func() error {
		close(p.jobs)
		wg.Wait()
		return p.spillError()
	}
}

// makeSpillDir makes the run's spill directory if it has none yet; only
// the spiller goroutine calls it.
func (p *pool) makeSpillDir() error {
	if p.spillDir != nil {
		return nil
	}
	d, err := fsutil.CreateOwned(filepath.Join(p.o.TempDir, spillBase))
	if err != nil {
		return fmt.Errorf("numerator: create the spill directory in %s (set --temp-dir to a writable directory with room): %w", p.o.TempDir, err)
	}
	p.spillDir = d
	return nil
}

func (p *pool) releaseShard(sh int) error {
	return errors.Join(p.state[sh].release(), p.offers[sh].release())
}

func (p *pool) release() error {
	var errs []error
	for sh := range p.state {
		errs = append(errs, p.releaseShard(sh))
	}
	errs = append(errs, p.spillDir.RemoveAll())
	return errors.Join(errs...)
}
