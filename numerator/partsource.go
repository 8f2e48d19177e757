package numerator

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardkit/shardkit/sharding"
)

// partSource streams one shard's rows straight from a state part file that
// this package wrote sorted, so that the previous state is neither held in
// memory nor sorted again. The merge checks the order as it reads.
type partSource struct {
	path  string
	shard uint32
	rows  int64
}

func (s *partSource) count() int64 { return s.rows }

func (s *partSource) open() (recordIter, error) {
	ctx, cancel := context.WithCancel(context.Background())
	it := &partIter{batches: make(chan []record, 2), cancel: cancel}
	it.wg.Go(func() {
		defer close(it.batches)
		var d batchDecoder
		it.scanErr = d.scanPart(ctx, s.path, stateColumns, true, func(batch []record) error {
			// The batch and its strings die with the Arrow batch: copy both.
			out := make([]record, len(batch))
			var a arena
			for i, r := range batch {
				if r.shard != s.shard {
					return fmt.Errorf("%w: a row of shard %d's part has shard_id %d", ErrBadState, s.shard, r.shard)
				}
				r.key.OfferID = a.intern(r.key.OfferID)
				r.hash = sharding.KeyHash(r.key)
				out[i] = r
			}
			select {
			case it.batches <- out:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	})
	return it, nil
}

type partIter struct {
	batches chan []record
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	scanErr error // set before batches is closed
	cur     []record
	i       int
	done    bool
}

func (it *partIter) next() (record, bool) {
	for it.i >= len(it.cur) {
		if it.done {
			return record{}, false
		}
		b, ok := <-it.batches
		if !ok {
			it.done = true
			return record{}, false
		}
		it.cur, it.i = b, 0
	}
	it.i++
	return it.cur[it.i-1], true
}

func (it *partIter) err() error {
	if !it.done {
		return nil
	}
	return it.scanErr
}

func (it *partIter) close() error {
	it.cancel()
	for range it.batches { // drain so the reader can stop
	}
	it.wg.Wait()
	return nil
}

// sortedShards returns a source per shard when the state's parts allow
// streaming them (see parquetTable.byShard); nil otherwise.
func (t *parquetTable) sortedShards(shards uint32) []sortedSource {
	if len(t.byShard) != int(shards) {
		return nil
	}
	out := make([]sortedSource, shards)
	for sh, p := range t.byShard {
		out[sh] = &partSource{path: p.path, shard: uint32(sh), rows: p.rows}
	}
	return out
}
