package numerator

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
)

// sorter collects one shard's records for one table and yields them sorted.
// Records are kept in memory, encoded as in spill files in large byte blocks
// with a small index entry each (neither holds pointers, so the garbage
// collector never scans them), until the pool's budget is exceeded; then the
// pool spills the largest sorter as a sorted run file (external sort).
type sorter struct {
	blocks [][]byte
	idx    []entry
	// bytes is the memory the sorter holds: its blocks' and its index's
	// capacity, not only what is used of them.
	bytes  int64
	runs   []string
	total  int64
	sorted bool
	// blockSize is the size of a new block; relayoutMax the largest sorter
	// (in bytes) that sortInMemory lays out again in sorted order (the
	// layout copies the records once more).
	blockSize   int
	relayoutMax int64
}

// entry locates one encoded record.
type entry struct {
	hash uint64
	blk  uint32
	off  uint32
	n    uint32
}

const (
	entrySize = 24
	// Blocks are 4 KiB to 1 MiB: every sorter holds one partly filled,
	// so small budgets with many sorters need small blocks.
	minSorterBlock = 4 << 10
	maxSorterBlock = 1 << 20
)

func (s *sorter) add(r *record) {
	need := 8 + 7*binary.MaxVarintLen64 + len(r.key.OfferID)
	if len(s.blocks) == 0 || cap(s.blocks[len(s.blocks)-1])-len(s.blocks[len(s.blocks)-1]) < need {
		b := make([]byte, 0, max(s.blockSize, minSorterBlock, need))
		s.blocks = append(s.blocks, b)
		s.bytes += int64(cap(b))
	}
	bi := len(s.blocks) - 1
	b := s.blocks[bi]
	start := len(b)
	b = appendRecordHead(b, r)
	b = append(b, r.key.OfferID...)
	b = appendRecordTail(b, r)
	s.blocks[bi] = b
	n := len(b) - start
	before := cap(s.idx)
	s.idx = append(s.idx, entry{hash: r.hash, blk: uint32(bi), off: uint32(start), n: uint32(n)})
	s.sorted = false
	s.bytes += int64(cap(s.idx)-before) * entrySize
	s.total++
}

// reserve makes room for n index entries at once (counted in bytes).
func (s *sorter) reserve(n int64) {
	if n <= int64(cap(s.idx)) {
		return
	}
	before := cap(s.idx)
	s.idx = slices.Grow(s.idx, int(n)-len(s.idx))
	s.bytes += int64(cap(s.idx)-before) * entrySize
}

// rec decodes the record of e; its offer_id points into the sorter's block.
func (s *sorter) rec(e *entry) record { return recAt(s.blocks, e) }

func recAt(blocks [][]byte, e *entry) record {
	r, _, err := decodeRecordBytes(blocks[e.blk][e.off : e.off+e.n])
	if err != nil { // we encoded it ourselves
		panic(fmt.Sprintf("numerator: sorter block corrupt: %v", err))
	}
	return r
}

func sortEntries(blocks [][]byte, idx []entry) {
	slices.SortFunc(idx, func(a, b entry) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		ra, rb := recAt(blocks, &a), recAt(blocks, &b)
		return ra.key.Compare(rb.key)
	})
}

func (s *sorter) sortInMemory() {
	if s.sorted {
		return
	}
	s.sorted = true
	sortEntries(s.blocks, s.idx)
	// Lay the records out in sorted order, so that the passes over them read
	// memory sequentially instead of missing the cache on every record;
	// not when the copy would take a large share of the budget.
	if s.bytes > s.relayoutMax {
		return
	}
	var blocks [][]byte
	for i := range s.idx {
		e := &s.idx[i]
		if len(blocks) == 0 || cap(blocks[len(blocks)-1])-len(blocks[len(blocks)-1]) < int(e.n) {
			blocks = append(blocks, make([]byte, 0, max(s.blockSize, minSorterBlock, int(e.n))))
		}
		bi := len(blocks) - 1
		off := len(blocks[bi])
		blocks[bi] = append(blocks[bi], s.blocks[e.blk][e.off:e.off+e.n]...)
		e.blk, e.off = uint32(bi), uint32(off)
	}
	s.blocks = blocks
}

// spillJob is a sorter's in-memory records taken out to be written as a
// sorted run, possibly on another goroutine while the sorter fills again.
type spillJob struct {
	s      *sorter
	blocks [][]byte
	idx    []entry
	bytes  int64
}

// detach hands the in-memory records to a spill job.
func (s *sorter) detach() *spillJob {
	j := &spillJob{s: s, blocks: s.blocks, idx: s.idx, bytes: s.bytes}
	s.blocks, s.idx, s.bytes, s.sorted = nil, nil, 0, false
	return j
}

// write sorts the job's records and writes them as one run file.
func (j *spillJob) write(dir string) (string, error) {
	sortEntries(j.blocks, j.idx)
	w, err := createSpill(dir)
	if err != nil {
		return "", err
	}
	for i := range j.idx {
		e := &j.idx[i]
		if _, err := w.w.Write(j.blocks[e.blk][e.off : e.off+e.n]); err != nil {
			_ = w.abort()
			return "", err
		}
	}
	return w.finish()
}

// source sorts what is in memory and returns the sorted stream of all
// records: the in-memory ones merged with the spilled runs.
func (s *sorter) source() sortedSource {
	s.sortInMemory()
	mem := &memSource{s: s}
	if len(s.runs) == 0 {
		return mem
	}
	return &mergeSource{runs: s.runs, mem: mem, n: s.total}
}

// memSource reads a sorted sorter's in-memory records.
type memSource struct{ s *sorter }

func (m *memSource) count() int64              { return int64(len(m.s.idx)) }
func (m *memSource) open() (recordIter, error) { return &memIter{s: m.s}, nil }

type memIter struct {
	s *sorter
	i int
}

func (it *memIter) next() (record, bool) {
	if it.i >= len(it.s.idx) {
		return record{}, false
	}
	it.i++
	return it.s.rec(&it.s.idx[it.i-1]), true
}
func (it *memIter) err() error   { return nil }
func (it *memIter) close() error { return nil }

// release drops the records and removes the run files.
func (s *sorter) release() error {
	var errs []error
	for _, p := range s.runs {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	s.blocks, s.idx, s.runs, s.bytes = nil, nil, nil, 0
	return errors.Join(errs...)
}

// mergeSource merges spilled runs and a sorted in-memory tail.
type mergeSource struct {
	runs []string
	mem  sortedSource
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
	mi, err := m.mem.open()
	if err != nil {
		_ = it.close()
		return nil, err
	}
	it.all = append(it.all, mi)
	it.h.heads = make([]record, len(it.all))
	for i, src := range it.all {
		if r, ok := src.next(); ok {
			it.h.heads[i] = r
			it.h.order = append(it.h.order, i)
		} else if err := src.err(); err != nil {
			_ = it.close()
			return nil, err
		}
	}
	heap.Init(&it.h)
	return it, nil
}

// mergeHeap orders the sources by their head records; it swaps small
// indices, not records.
type mergeHeap struct {
	heads []record // heads[i] is source i's current record
	order []int    // a min-heap of source indices
}

func (h *mergeHeap) Len() int { return len(h.order) }
func (h *mergeHeap) Less(i, j int) bool {
	return compareRecords(&h.heads[h.order[i]], &h.heads[h.order[j]]) < 0
}
func (h *mergeHeap) Swap(i, j int) { h.order[i], h.order[j] = h.order[j], h.order[i] }
func (h *mergeHeap) Push(x any)    { h.order = append(h.order, x.(int)) }
func (h *mergeHeap) Pop() any {
	x := h.order[len(h.order)-1]
	h.order = h.order[:len(h.order)-1]
	return x
}

type mergeIter struct {
	all []recordIter
	h   mergeHeap
	e   error
}

func (m *mergeIter) next() (record, bool) {
	if len(m.h.order) == 0 || m.e != nil {
		return record{}, false
	}
	top := m.h.order[0]
	out := m.h.heads[top]
	if r, ok := m.all[top].next(); ok {
		m.h.heads[top] = r
		heap.Fix(&m.h, 0)
	} else {
		if err := m.all[top].err(); err != nil {
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
