package numerator

import (
	"container/heap"
	"errors"
	"os"
	"slices"
)

// sorter collects one shard's records for one table and yields them sorted.
// Records are kept in memory until the pool's budget is exceeded; then the
// pool spills the largest sorter as a sorted run file (external sort).
type sorter struct {
	recs   []record
	bytes  int64
	arena  arena
	runs   []string
	total  int64
	sorted bool
}

func (s *sorter) add(r record) {
	if r.key.OfferID != "" {
		r.key.OfferID = s.arena.intern(r.key.OfferID)
	}
	s.recs = append(s.recs, r)
	s.sorted = false
	s.bytes += recordSize(&r)
	s.total++
}

func (s *sorter) sortInMemory() {
	if s.sorted {
		return
	}
	s.sorted = true
	slices.SortFunc(s.recs, func(a, b record) int { return compareRecords(&a, &b) })
}

// spill writes the in-memory records as one sorted run and frees them.
func (s *sorter) spill(dir string) error {
	if len(s.recs) == 0 {
		return nil
	}
	s.sortInMemory()
	w, err := createSpill(dir)
	if err != nil {
		return err
	}
	for i := range s.recs {
		if err := w.write(&s.recs[i]); err != nil {
			_ = w.abort()
			return err
		}
	}
	path, err := w.finish()
	if err != nil {
		return err
	}
	s.runs = append(s.runs, path)
	s.recs, s.bytes, s.arena = nil, 0, arena{}
	return nil
}

// source sorts what is in memory and returns the sorted stream of all
// records: the in-memory ones merged with the spilled runs.
func (s *sorter) source() sortedSource {
	s.sortInMemory()
	if len(s.runs) == 0 {
		return sliceSource(s.recs)
	}
	return &mergeSource{runs: s.runs, mem: s.recs, n: s.total}
}

// release drops the records and removes the run files.
func (s *sorter) release() error {
	var errs []error
	for _, p := range s.runs {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.recs, s.runs, s.bytes, s.arena = nil, nil, 0, arena{}
	return errors.Join(errs...)
}

// mergeSource merges spilled runs and a sorted in-memory tail.
type mergeSource struct {
	runs []string
	mem  []record
	n    int64
}

func (m *mergeSource) count() int64 { return m.n }

func (m *mergeSource) open() (recordIter, error) {
	it := &mergeIter{}
	for _, p := range m.runs {
		r, err := openSpill(p)
		if err != nil {
			_ = it.close()
			return nil, err
		}
		it.all = append(it.all, r)
	}
	it.all = append(it.all, &sliceIter{recs: m.mem})
	for _, src := range it.all {
		if r, ok := src.next(); ok {
			it.h = append(it.h, mergeHead{rec: r, src: src})
		} else if err := src.err(); err != nil {
			_ = it.close()
			return nil, err
		}
	}
	heap.Init(&it.h)
	return it, nil
}

type mergeHead struct {
	rec record
	src recordIter
}

type mergeHeap []mergeHead

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return compareRecords(&h[i].rec, &h[j].rec) < 0 }
func (h mergeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)        { *h = append(*h, x.(mergeHead)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type mergeIter struct {
	all []recordIter
	h   mergeHeap
	e   error
}

func (m *mergeIter) next() (record, bool) {
	if len(m.h) == 0 || m.e != nil {
		return record{}, false
	}
	top := &m.h[0]
	out := top.rec
	if r, ok := top.src.next(); ok {
		top.rec = r
		heap.Fix(&m.h, 0)
	} else {
		if err := top.src.err(); err != nil {
			m.e = err
			return record{}, false
		}
		heap.Pop(&m.h)
	}
	return out, true
}

func (m *mergeIter) err() error { return m.e }

func (m *mergeIter) close() error {
	var errs []error
	for _, s := range m.all {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}
