package storage

import (
	"encoding/binary"
	"hash/fnv"

	"github.com/cockroachdb/pebble/v2"
)

// Digest is a digest of every key and value under prefix, as r holds them:
// two members of one Raft group that applied the same entries hold one
// digest of their state machine's keyspace, so two digests there are two
// members whose state diverged. Each key and value goes in with its
// length, so no two different sets of them hash alike by how they split.
func Digest(r pebble.Reader, prefix []byte) (uint64, error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	var n [4]byte
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return 0, err
		}
		for _, b := range [][]byte{it.Key(), v} {
			binary.BigEndian.PutUint32(n[:], uint32(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return 0, err
	}
	return h.Sum64(), it.Close()
}
