package sharding

import (
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/shardkit/shardkit/tuple"
)

// DefaultBucketCount is the number of buckets of a new cluster's data.
// Bucket ids run from 1 to the count.
const DefaultBucketCount = 3000

// MaxBucketCount bounds a cluster's bucket count (group 0 keeps a record
// of every bucket's replicaset).
const MaxBucketCount = 1 << 20

// Errors of the bucket hash.
var (
	ErrInvalidShardingKey = errors.New("sharding: invalid sharding key")
	ErrInvalidBucketCount = errors.New("sharding: invalid bucket count")
)

// BucketOf returns the bucket, in [1, count], of a record's sharding key:
//
//	1 + CRC-32C(tuple.AppendKey(nil, shardingKey...)) mod count
//
// CRC-32C is the Castagnoli CRC of hash/crc32, taken over the key's
// order-preserving encoding (as vshard's mpcrc32 hashes the key's
// msgpack). An integer hashes by its value, whatever type its field
// declares: Int(5) and Uint(5) are one value with one encoding, so they
// land in the same bucket.
//
// It is frozen, as a released scheme is: data placed by it stays placed,
// so neither this function nor the key encoding ever changes. A different
// placement would be a different function.
//
// The key must have 1 to tuple.MaxKeyParts values and no NaN, and count
// must be at least 1.
func BucketOf(shardingKey []tuple.Value, count uint32) (uint32, error) {
	if count == 0 {
		return 0, fmt.Errorf("%w: 0 buckets; a cluster has at least 1 (DefaultBucketCount is %d)", ErrInvalidBucketCount, DefaultBucketCount)
	}
	if len(shardingKey) == 0 {
		return 0, fmt.Errorf("%w: the key has no parts; a sharding key has at least 1", ErrInvalidShardingKey)
	}
	var buf [64]byte
	key, err := tuple.AppendKey(buf[:0], shardingKey...)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidShardingKey, err)
	}
	return BucketOfEncoded(key, count), nil
}

// BucketOfEncoded is BucketOf for a caller that already holds the sharding
// key's encoding (tuple.AppendKey of its parts). It returns 0, which is no
// bucket, when count is 0.
func BucketOfEncoded(encodedKey []byte, count uint32) uint32 {
	if count == 0 {
		return 0
	}
	return 1 + crc32.Checksum(encodedKey, crc32.MakeTable(crc32.Castagnoli))%count
}

// Bucket set digests tell whether a collection of bucket sets, read
// apart (one per replicaset, at different instants), covers every bucket
// exactly once: a set's digest is the sum, mod 2^64, of its buckets'
// BucketDigest, so disjoint sets' digests add up to their union's, and a
// bucket counted twice or not at all changes the sum (BucketDigest is a
// bijection, so one bucket in place of another always does; a
// combination of misses and doubles that cancels out has odds of about
// 2^-64). Count checks the per-replicaset counts it sums with it: a
// bucket moving while they were read is counted by neither side, or by
// both.

// BucketDigest is bucket b's share of a bucket set's digest.
func BucketDigest(b uint32) uint64 { return mix64(uint64(b) ^ 0x9e3779b97f4a7c15) }

// AllBucketsDigest is the digest of the buckets 1..count, each once.
func AllBucketsDigest(count uint32) uint64 {
	var d uint64
	for b := uint32(1); b <= count; b++ {
		d += BucketDigest(b)
	}
	return d
}
