package replicaset

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// A bucket's request ids go with its copy, so that a retry of a write the
// source applied is answered, not applied again, wherever the bucket is
// when the retry arrives. A copy brings them by the thousand (one a write
// in the window), and each taken apart into a message, looked up and put
// into the window one by one would cost every member more than the
// copy's tables (docs/benchmarks.md, "Copied request ids as blocks"). So
// those of requestIDLen bytes (every id the data service
// takes) go in one block a chunk (rspb.SortedRequests), in order, that
// the destination's leader checks once and its members store and hold as
// it came: a lookup is a binary search in the block of the write's
// bucket (a retry writes the bucket its first attempt wrote), and an id
// nobody retries costs no work of its own (docs/design/moves.md, "Copied
// request ids as blocks").

// requestBlock is a SortedRequests' three blocks, read in place.
type requestBlock struct{ ids, results, ends []byte }

func blockOf(s *rspb.SortedRequests) requestBlock {
	return requestBlock{ids: s.GetIds(), results: s.GetResults(), ends: s.GetEnds()}
}

// len is how many ids the block holds.
func (b requestBlock) len() int { return len(b.ids) / requestIDLen }

// id is the i-th id.
func (b requestBlock) id(i int) []byte {
	return b.ids[i*requestIDLen : (i+1)*requestIDLen : (i+1)*requestIDLen]
}

func (b requestBlock) end(i int) int {
	return int(binary.LittleEndian.Uint32(b.ends[4*i:]))
}

// result is the i-th id's result: nil where the block's results are not
// held (copiedRecord), or where its ends do not frame one (a block not
// checked whole).
func (b requestBlock) result(i int) []byte {
	if b.results == nil {
		return nil
	}
	start := 0
	if i > 0 {
		start = b.end(i - 1)
	}
	end := b.end(i)
	if start >= end || end > len(b.results) {
		return nil
	}
	return b.results[start:end:end]
}

// find returns the position of id in the block, by binary search.
func (b requestBlock) find(id []byte) (int, bool) {
	if len(id) != requestIDLen {
		return 0, false
	}
	lo, hi := 0, b.len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch c := bytes.Compare(b.id(m), id); {
		case c == 0:
			return m, true
		case c < 0:
			lo = m + 1
		default:
			hi = m
		}
	}
	return 0, false
}

// framing checks that the blocks fit each other, in O(1): what a member
// checks at apply (the leader checked the rest before proposing).
func (b requestBlock) framing() error {
	n := b.len()
	switch {
	case len(b.ids)%requestIDLen != 0:
		return fmt.Errorf("its ids are %d bytes, not a multiple of %d", len(b.ids), requestIDLen)
	case len(b.ends) != 4*n:
		return fmt.Errorf("it has %d bytes of result ends for %d ids, not 4 an id", len(b.ends), n)
	case n == 0 && len(b.results) != 0:
		return fmt.Errorf("it has %d bytes of results and no id", len(b.results))
	case n > 0 && b.end(n-1) != len(b.results):
		return fmt.Errorf("its last result ends at %d, its results are %d bytes", b.end(n-1), len(b.results))
	}
	return nil
}

// check checks the block whole, as the destination's leader does before
// proposing it: its framing, its ids in ascending order, none twice, and
// each result a BatchResult (decoded whole) of bucket.
func (b requestBlock) check(bucket uint32) error {
	if err := b.framing(); err != nil {
		return err
	}
	res := &rspb.BatchResult{}
	start := 0
	for i := range b.len() {
		if i > 0 && bytes.Compare(b.id(i-1), b.id(i)) >= 0 {
			return fmt.Errorf("request id %x follows %x: the ids are not in ascending order, each once", b.id(i), b.id(i-1))
		}
		end := b.end(i)
		if end <= start || end > len(b.results) {
			return fmt.Errorf("request id %x's result ends at %d, after %d: not within the %d bytes of results, or empty", b.id(i), end, start, len(b.results))
		}
		*res = rspb.BatchResult{}
		if err := res.UnmarshalVT(b.results[start:end]); err != nil {
			return fmt.Errorf("the result copied with request id %x is not a BatchResult: %w", b.id(i), err)
		}
		if res.GetBucket() != bucket {
			return fmt.Errorf("the result copied with request id %x is of bucket %d", b.id(i), res.GetBucket())
		}
		start = end
	}
	return nil
}

// appendRequest appends id (of requestIDLen bytes, above the block's
// last) and its result to s.
func appendRequest(s *rspb.SortedRequests, id, result []byte) {
	s.Ids = append(s.Ids, id...)
	s.Results = append(s.Results, result...)
	s.Ends = binary.LittleEndian.AppendUint32(s.Ends, uint32(len(s.Results)))
}

// copiedRequest is a request id of requestIDLen bytes a source sends and
// its result, as stored; hi and lo are the id's two halves as big-endian
// numbers, which order ids as their bytes do, and cheaper.
type copiedRequest struct {
	hi, lo     uint64
	id, result []byte
}

func newCopiedRequest(id, result []byte) copiedRequest {
	return copiedRequest{hi: binary.BigEndian.Uint64(id), lo: binary.BigEndian.Uint64(id[8:]), id: id, result: result}
}

// sortedRequests sorts rs by id and drops an id's second sight (an id
// both in the window and in a copy's block: a write the destination of an
// earlier move answered from the source's answer).
func sortedRequests(rs []copiedRequest) []copiedRequest {
	slices.SortFunc(rs, func(x, y copiedRequest) int {
		if c := cmp.Compare(x.hi, y.hi); c != 0 {
			return c
		}
		return cmp.Compare(x.lo, y.lo)
	})
	return slices.CompactFunc(rs, func(x, y copiedRequest) bool { return x.hi == y.hi && x.lo == y.lo })
}

// newSortedRequests is a block with room for the ids of rs and their
// results, up to about limit bytes.
func newSortedRequests(rs []copiedRequest, limit int) *rspb.SortedRequests {
	n, size := 0, 0
	for _, r := range rs {
		if size >= limit {
			break
		}
		n++
		size += len(r.result)
	}
	return &rspb.SortedRequests{Ids: make([]byte, 0, n*requestIDLen), Results: make([]byte, 0, size), Ends: make([]byte, 0, 4*n)}
}

// copiedRecord is a block of request ids a copy brought, as a member
// stores it (a record, requestRecord: ms, index, chunk) and holds it in
// the window.
type copiedRecord struct {
	ms     int64
	bucket uint32
	index  uint64
	chunk  uint32
	// block's results and ends are nil where the window had no room to
	// keep them (RequestResultsKept): they are read from the record.
	block requestBlock
}

// kept is the bytes of results the record holds.
func (r *copiedRecord) kept() int { return len(r.block.results) + len(r.block.ends) }
