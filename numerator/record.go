package numerator

import (
	"github.com/shardkit/shardkit/sharding"
)

// record is one row of a shard's sort: an offer key with its sort hash and,
// for state rows, the stored assignment. Rows are ordered by (hash, key):
// comparing the hash first is cheap, and the key breaks the rare ties, so the
// order is total and the same on every machine.
type record struct {
	hash     uint64
	key      sharding.OfferKey
	shard    uint32 // state rows: stored shard_id
	doc      uint32 // state rows: doc_id
	lastSeen uint64 // state rows: last_seen_run
}

func newRecord(k sharding.OfferKey) record {
	return record{hash: sharding.KeyHash(k), key: k}
}

func compareRecords(a, b *record) int {
	switch {
	case a.hash < b.hash:
		return -1
	case a.hash > b.hash:
		return 1
	case a.key == b.key: // equal hashes are mostly equal keys: the join's matches
		return 0
	}
	return a.key.Compare(b.key)
}

// recordIter walks records in (hash, key) order. The record returned by next
// stays valid until the iterator is closed.
type recordIter interface {
	next() (record, bool)
	err() error
	close() error
}

// sortedSource is a re-openable sorted stream of records: the merge reads a
// shard twice (plan, then emit).
type sortedSource interface {
	open() (recordIter, error)
	count() int64
}
