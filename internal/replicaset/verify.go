package replicaset

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// VerifyData checks one replicaset group's data, as r holds it, against
// what the state machine keeps true of it between entries, and returns
// one line per rule broken, naming its bucket (none: the data is sound;
// an error: r could not be read):
//
//   - a bucket's counts (n/) are the tuples it holds (t/), space by
//     space, except while its copy is under way (RECEIVING, not copied:
//     a member that re-applied a copy entry counts again at the copied
//     mark, "Derived state" in docs/design/moves.md);
//   - a bucket with no record, or GARBAGE, holds nothing: no tuple,
//     tombstone, count, revision or event;
//   - tombstones (x/) are only in a bucket being received;
//   - no event (e/) is above its bucket's revision (r/), once its copy
//     is complete.
//
// It reads every key of the group's data once: for tests and offline
// checks of a stopped instance's database, not for a serving one.
func VerifyData(r pebble.Reader, group uint64) ([]string, error) {
	k := newKeys(group)
	records := map[uint32]*rspb.BucketState{}
	if err := scan(r, k.buckets(), func(key, v []byte) error {
		b := binary.BigEndian.Uint32(key[len(key)-4:])
		st, err := decodeBucketState(b, v)
		if err != nil {
			return err
		}
		records[b] = st
		return nil
	}); err != nil {
		return nil, err
	}
	type spaceOf struct{ bucket, space uint32 }
	tuples := map[spaceOf]uint64{}
	counts := map[spaceOf]uint64{}
	tombs := map[uint32]int{}
	revs := map[uint32]uint64{}
	events := map[uint32]uint64{} // the highest event revision of each bucket
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	bucketSpace := func(key []byte, tag string) (spaceOf, bool) {
		rest := key[k.bucketAt():]
		if len(rest) < 8 {
			badf("a %s key %x is too short", tag, key)
			return spaceOf{}, false
		}
		return spaceOf{binary.BigEndian.Uint32(rest), binary.BigEndian.Uint32(rest[4:])}, true
	}
	steps := []struct {
		prefix []byte
		fn     func(key, v []byte) error
	}{
		{k.sub(storage.DataTuple, 0), func(key, _ []byte) error {
			if s, ok := bucketSpace(key, "tuple"); ok {
				tuples[s]++
			}
			return nil
		}},
		{k.sub(storage.DataTombstone, 0), func(key, _ []byte) error {
			if s, ok := bucketSpace(key, "tombstone"); ok {
				tombs[s.bucket]++
			}
			return nil
		}},
		{k.counts(), func(key, v []byte) error {
			s, ok := bucketSpace(key, "count")
			switch {
			case !ok:
			case len(v) != 8 || binary.BigEndian.Uint64(v) == 0:
				badf("bucket %d: the count of space %d is %x (a count is 8 bytes, never 0)", s.bucket, s.space, v)
			default:
				counts[s] = binary.BigEndian.Uint64(v)
			}
			return nil
		}},
		{k.revisions(), func(key, v []byte) error {
			b := binary.BigEndian.Uint32(key[len(key)-4:])
			rev, err := decodeRevision(b, v)
			if err != nil {
				badf("%v", err)
				return nil
			}
			revs[b] = rev
			return nil
		}},
		{k.sub(storage.DataEvent, 0), func(key, _ []byte) error {
			rest := key[k.bucketAt():]
			if len(rest) != 12 {
				badf("an event key %x is not <bucket:4><revision:8>", key)
				return nil
			}
			b := binary.BigEndian.Uint32(rest)
			events[b] = max(events[b], binary.BigEndian.Uint64(rest[4:]))
			return nil
		}},
	}
	for _, s := range steps {
		if err := scan(r, s.prefix, s.fn); err != nil {
			return nil, err
		}
	}

	holds := func(b uint32) bool {
		switch records[b].GetState() {
		case rspb.BucketState_STATE_ACTIVE, rspb.BucketState_STATE_SENDING, rspb.BucketState_STATE_RECEIVING:
			return true
		}
		return false
	}
	spaces := map[spaceOf]struct{}{}
	for s := range tuples {
		spaces[s] = struct{}{}
	}
	for s := range counts {
		spaces[s] = struct{}{}
	}
	for _, s := range slices.SortedFunc(maps.Keys(spaces), func(x, y spaceOf) int {
		return cmp.Or(cmp.Compare(x.bucket, y.bucket), cmp.Compare(x.space, y.space))
	}) {
		st := records[s.bucket]
		switch {
		case !holds(s.bucket):
			badf("bucket %d is %s here, yet holds %d tuples of space %d and counts %d", s.bucket, describeRecord(st), tuples[s], s.space, counts[s])
		case st.GetState() == rspb.BucketState_STATE_RECEIVING && !st.GetCopied():
		case tuples[s] != counts[s]:
			badf("bucket %d (%s) holds %d tuples of space %d, but counts %d", s.bucket, describeRecord(st), tuples[s], s.space, counts[s])
		}
	}
	for _, b := range slices.Sorted(maps.Keys(tombs)) {
		if st := records[b]; st.GetState() != rspb.BucketState_STATE_RECEIVING {
			badf("bucket %d is %s here, yet holds %d tombstones", b, describeRecord(st), tombs[b])
		}
	}
	for _, b := range slices.Sorted(maps.Keys(revs)) {
		if !holds(b) {
			badf("bucket %d is %s here, yet has revision %d", b, describeRecord(records[b]), revs[b])
		}
	}
	for _, b := range slices.Sorted(maps.Keys(events)) {
		switch {
		case !holds(b):
			badf("bucket %d is %s here, yet has events up to revision %d", b, describeRecord(records[b]), events[b])
		case records[b].GetState() == rspb.BucketState_STATE_RECEIVING && !records[b].GetCopied():
			// The copied mark raises the revision to the source's.
		case events[b] > revs[b]:
			badf("bucket %d (%s) has an event at revision %d, above its revision %d", b, describeRecord(records[b]), events[b], revs[b])
		}
	}
	return bad, nil
}

// DataGroups returns the replicaset groups whose data r holds, in order.
func DataGroups(r pebble.Reader) ([]uint64, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: []byte(storage.PrefixData), UpperBound: storage.PrefixEnd([]byte(storage.PrefixData))})
	if err != nil {
		return nil, err
	}
	var out []uint64
	for ok := it.First(); ok; {
		key := it.Key()
		n := len(storage.PrefixData)
		if len(key) < n+9 {
			ok = it.Next()
			continue
		}
		g := binary.BigEndian.Uint64(key[n:])
		out = append(out, g)
		ok = it.SeekGE(storage.PrefixEnd(storage.GroupPrefix(storage.PrefixData, g)))
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return nil, err
	}
	return out, it.Close()
}
