package replicaset

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/sharding"
)

// Reads of the replicaset's data. They read whatever r holds: the
// database (what this member has applied) or a snapshot of it. A caller
// that needs a linearizable read makes a read index on the group first.

// Stored is a tuple as stored: its version and encoding.
type Stored struct {
	Version uint64
	Tuple   []byte
	// Key is the primary key's encoding (set by Range).
	Key []byte
}

// Get reads the tuple of space spaceID with the encoded primary key key in
// bucket b.
// A read of the state machine's own database goes through the row cache
// (rowcache.go); one of a snapshot or a batch does not.
func (sm *SM) Get(r pebble.Reader, b uint32, spaceID uint32, key []byte) (Stored, bool, error) {
	tk := sm.k.tuple(b, spaceID, key)
	var v []byte
	if db, ok := r.(*pebble.DB); ok && db == sm.db {
		cached, hit, seq := sm.rows.read(b, tk)
		if hit {
			v = cached
		} else {
			var err error
			if v, err = get(r, tk); err != nil {
				return Stored{}, false, err
			}
			if sm.rows.fill(b, tk, v, seq) {
				v = bytes.Clone(v) // the cache keeps the one it filled
			}
		}
	} else {
		var err error
		if v, err = get(r, tk); err != nil {
			return Stored{}, false, err
		}
	}
	if v == nil {
		return Stored{}, false, nil
	}
	ver, t, err := decodeStored(v)
	if err != nil {
		return Stored{}, false, err
	}
	return Stored{Version: ver, Tuple: t}, true, nil
}

// KeyRange bounds a range read within one space of one bucket, in the
// key encoding (tuple.AppendKey): keys >= Lower (empty: from the first)
// and < Upper (empty: to the last), in ascending order or, with Reverse,
// descending.
type KeyRange struct {
	Lower, Upper []byte
	Reverse      bool
}

// afterKey returns the smallest key encoding greater than key and than
// every key encoding that starts with it: a lower bound past key. A key
// encoding starts with a tag byte below 0xff, so it has one.
func afterKey(key []byte) []byte {
	return storage.PrefixEnd(key)
}

// empty reports whether no key fits the range.
func (kr KeyRange) empty() bool {
	return len(kr.Lower) > 0 && len(kr.Upper) > 0 && bytes.Compare(kr.Lower, kr.Upper) >= 0
}

// before reports whether key a comes before key b in kr's order.
func (kr KeyRange) before(a, b []byte) bool {
	if kr.Reverse {
		return bytes.Compare(a, b) > 0
	}
	return bytes.Compare(a, b) < 0
}

// Range reads up to limit tuples of space spaceID in bucket b within kr,
// in its order; more says that another tuple within kr follows.
func (sm *SM) Range(r pebble.Reader, b uint32, spaceID uint32, kr KeyRange, limit int) (out []Stored, more bool, err error) {
	if kr.empty() {
		return nil, false, nil
	}
	prefix := sm.k.tuplePrefix(b, spaceID)
	opts := &pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)}
	if len(kr.Lower) > 0 {
		opts.LowerBound = append(bytes.Clone(prefix), kr.Lower...)
	}
	if len(kr.Upper) > 0 {
		opts.UpperBound = append(bytes.Clone(prefix), kr.Upper...)
	}
	it, err := r.NewIter(opts)
	if err != nil {
		return nil, false, err
	}
	defer it.Close()
	first, next := it.First, it.Next
	if kr.Reverse {
		first, next = it.Last, it.Prev
	}
	for ok := first(); ok; ok = next() {
		if len(out) == limit {
			return out, true, it.Error()
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, false, err
		}
		ver, t, err := decodeStored(v)
		if err != nil {
			return nil, false, err
		}
		out = append(out, Stored{Version: ver, Tuple: bytes.Clone(t), Key: bytes.Clone(it.Key()[len(prefix):])})
	}
	return out, false, it.Error()
}

// BucketCounts are a replicaset's buckets by state.
type BucketCounts struct {
	Active, Sending, Receiving, Garbage int
}

// Buckets returns every bucket record of the replicaset as r holds it
// (from memory when r is the state machine's database), and how many
// there are of each state. Records are shared: never change one.
func (sm *SM) Buckets(r pebble.Reader) (map[uint32]*rspb.BucketState, BucketCounts, error) {
	var out map[uint32]*rspb.BucketState
	if db, ok := r.(*pebble.DB); ok && db == sm.db {
		sm.pubMu.RLock()
		out = maps.Clone(sm.pub)
		sm.pubMu.RUnlock()
	} else {
		out = map[uint32]*rspb.BucketState{}
		err := scan(r, sm.k.buckets(), func(k, v []byte) error {
			st := &rspb.BucketState{}
			if err := proto.Unmarshal(v, st); err != nil {
				return fmt.Errorf("replicaset: bucket record %x: %w", k, err)
			}
			out[binary.BigEndian.Uint32(k[len(k)-4:])] = st
			return nil
		})
		if err != nil {
			return nil, BucketCounts{}, err
		}
	}
	var c BucketCounts
	for _, st := range out {
		switch st.GetState() {
		case rspb.BucketState_STATE_ACTIVE:
			c.Active++
		case rspb.BucketState_STATE_SENDING:
			c.Sending++
		case rspb.BucketState_STATE_RECEIVING:
			c.Receiving++
		case rspb.BucketState_STATE_GARBAGE:
			c.Garbage++
		}
	}
	return out, c, nil
}

// localCounts is what SM.localCount reads of a replicaset at one instant.
type localCounts struct {
	// tuples and the held buckets' number and digest (sharding.BucketDigest
	// summed): the active buckets and the receiving ones whose copy is
	// complete (their stored count is then the whole bucket's).
	tuples, buckets, digest uint64
	// copying are the receiving buckets whose copy is under way, with
	// their records; their stored counts are not in tuples.
	copying map[uint32]*rspb.BucketState
}

// localCount reads, from r (a snapshot, so that records and counts are of
// one instant), how many tuples of space id the buckets this replicaset
// holds have: those active here, and those receiving (this replicaset is
// their curr, R5; their source, frozen, counts them no more; a receiving
// bucket whose source has not frozen it yet is left out by CountHeld, its
// source counting it).
func (sm *SM) localCount(r pebble.Reader, space uint32) (localCounts, error) {
	buckets, _, err := sm.Buckets(r)
	if err != nil {
		return localCounts{}, err
	}
	hc := localCounts{copying: map[uint32]*rspb.BucketState{}}
	for b, st := range buckets {
		switch st.GetState() {
		case rspb.BucketState_STATE_RECEIVING:
			if !st.GetCopied() {
				hc.copying[b] = st
				continue
			}
		case rspb.BucketState_STATE_ACTIVE:
		default:
			continue
		}
		hc.buckets++
		hc.digest += sharding.BucketDigest(b)
	}
	err = scan(r, sm.k.counts(), func(k, v []byte) error {
		if len(k) < 8 || len(v) != 8 || binary.BigEndian.Uint32(k[len(k)-4:]) != space {
			return nil
		}
		b := binary.BigEndian.Uint32(k[len(k)-8:])
		switch st := buckets[b]; {
		case st.GetState() == rspb.BucketState_STATE_ACTIVE,
			st.GetState() == rspb.BucketState_STATE_RECEIVING && st.GetCopied():
			hc.tuples += binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return hc, err
}

// storedCount returns bucket b's stored count of space id as r holds it.
func (sm *SM) storedCount(r pebble.Reader, b, space uint32) (uint64, error) {
	v, err := get(r, sm.k.count(b, space))
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}

// Count returns how many tuples of space id the replicaset's active
// buckets hold (every bucket counted once in the cluster: a bucket is
// active on one replicaset).
func (sm *SM) Count(r pebble.Reader, space uint32) (uint64, error) {
	buckets, _, err := sm.Buckets(r)
	if err != nil {
		return 0, err
	}
	var n uint64
	err = scan(r, sm.k.counts(), func(k, v []byte) error {
		if len(k) < 8 || len(v) != 8 || binary.BigEndian.Uint32(k[len(k)-4:]) != space {
			return nil
		}
		b := binary.BigEndian.Uint32(k[len(k)-8:])
		if buckets[b].GetState() == rspb.BucketState_STATE_ACTIVE {
			n += binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return n, err
}
