package numerator

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/shardkit/shardkit/sharding"
)

// memState is a state held in memory, for tests of the algorithm.
type memState struct {
	meta StateMeta
	rows []record // shard, doc, lastSeen set
}

type memTable []record

func (m memTable) rowCount() int64 { return int64(len(m)) }

func (m memTable) scan(ctx context.Context, fn func([]record) error) error {
	// Small batches, so that batching is exercised.
	for i := 0; i < len(m); i += 3 {
		if err := fn(m[i:min(i+3, len(m))]); err != nil {
			return err
		}
	}
	return nil
}

// memOutputs collects a run's output rows.
type memOutputs struct {
	mu        sync.Mutex
	writers   []*memWriter
	committed bool
	aborted   bool
}

type memWriter struct {
	shard      uint32
	st, nd, ex []record
}

func (w *memWriter) state(r *record) error   { w.st = append(w.st, *r); return nil }
func (w *memWriter) newDoc(r *record) error  { w.nd = append(w.nd, *r); return nil }
func (w *memWriter) expired(r *record) error { w.ex = append(w.ex, *r); return nil }
func (w *memWriter) close() error            { return nil }

func (m *memOutputs) openShard(shard uint32, _ StateMeta) (shardWriter, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := &memWriter{shard: shard}
	m.writers = append(m.writers, w)
	return w, nil
}

func (m *memOutputs) commit() error { m.committed = true; return nil }
func (m *memOutputs) abort() error  { m.aborted = true; return nil }

// runMem runs the numerator on in-memory tables.
func runMem(t *testing.T, prev *memState, offers []sharding.OfferKey, o Options) (*memState, Result, []record, []record) {
	t.Helper()
	next, res, newDocs, expired, err := runMemErr(prev, offers, o)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	return next, res, newDocs, expired
}

func runMemErr(prev *memState, offers []sharding.OfferKey, o Options) (*memState, Result, []record, []record, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, Result{}, nil, nil, err
	}
	in := make(memTable, len(offers))
	for i, k := range offers {
		in[i] = record{key: k}
	}
	out := &memOutputs{}
	var pm *StateMeta
	var st rowSource
	if prev != nil {
		pm, st = &prev.meta, memTable(prev.rows)
	}
	res, err := execute(context.Background(), o, pm, st, in, out)
	if err != nil {
		return nil, res, nil, nil, err
	}
	if !out.committed {
		return nil, res, nil, nil, errors.New("execute returned without committing")
	}
	next := &memState{meta: res.State}
	var newDocs, expired []record
	for _, w := range out.writers {
		next.rows = append(next.rows, w.st...)
		newDocs = append(newDocs, w.nd...)
		expired = append(expired, w.ex...)
	}
	return next, res, newDocs, expired, nil
}

// assignment maps keys to (shard, doc).
type pos struct{ shard, doc uint32 }

func (m *memState) assignment() map[sharding.OfferKey]pos {
	a := make(map[sharding.OfferKey]pos, len(m.rows))
	for _, r := range m.rows {
		a[r.key] = pos{r.shard, r.doc}
	}
	return a
}

func docsOf(rs []record) []uint32 {
	d := make([]uint32, 0, len(rs))
	for _, r := range rs {
		d = append(d, r.doc)
	}
	slices.Sort(d)
	return d
}

func keysOf(rs []record) []sharding.OfferKey {
	m := make(map[sharding.OfferKey]bool)
	for _, r := range rs {
		m[r.key] = true
	}
	return slices.SortedFunc(maps.Keys(m), sharding.OfferKey.Compare)
}

func slicesSortRecords(rs []record) {
	slices.SortFunc(rs, func(a, b record) int {
		if c := a.key.Compare(b.key); c != 0 {
			return c
		}
		return int(a.shard) - int(b.shard)
	})
}
