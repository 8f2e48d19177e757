package sharding

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/tuple"
)

// Golden buckets, computed once when the bucket hash was released and
// checked independently in Python (the key encoding written from its
// documentation, a bitwise CRC-32C). They must never change: data is
// placed by them.
func TestBucketOfIsFrozen(t *testing.T) {
	t.Parallel()
	ref, err := tuple.ParseUUID("123e4567-e89b-12d3-a456-426614174000")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key    []tuple.Value
		count  uint32
		hex    string // tuple.AppendKey of the key
		bucket uint32
	}{
		{[]tuple.Value{tuple.Uint(0)}, 3000, "050000000000000000", 1001},
		{[]tuple.Value{tuple.Uint(1)}, 3000, "050000000000000001", 956},
		{[]tuple.Value{tuple.Uint(42)}, 3000, "05000000000000002a", 1159},
		{[]tuple.Value{tuple.Uint(math.MaxUint64)}, 3000, "05ffffffffffffffff", 2334},
		{[]tuple.Value{tuple.Int(-1)}, 3000, "04ffffffffffffffff", 2382},
		{[]tuple.Value{tuple.Int(math.MinInt64)}, 3000, "048000000000000000", 1149},
		{[]tuple.Value{tuple.String("")}, 3000, "070001", 1785},
		{[]tuple.Value{tuple.String("user-1")}, 3000, "07757365722d310001", 2363},
		{[]tuple.Value{tuple.String("a\x00b")}, 3000, "076100ff620001", 1771},
		{[]tuple.Value{tuple.String("\x00")}, 3000, "0700ff0001", 2955},
		{[]tuple.Value{tuple.Bytes([]byte{0, 1, 2})}, 3000, "0800ff01020001", 1860},
		{[]tuple.Value{tuple.Uint(7), tuple.String("sku-1")}, 3000, "05000000000000000707736b752d310001", 1277},
		{[]tuple.Value{tuple.Int(-7), tuple.Bool(true), tuple.Null()}, 3000, "04fffffffffffffff90301", 307},
		{[]tuple.Value{tuple.Double(1.5)}, 3000, "06bff8000000000000", 2129},
		{[]tuple.Value{ref}, 3000, "09123e4567e89b12d3a456426614174000", 1680},
		{[]tuple.Value{tuple.Uint(42)}, 16, "05000000000000002a", 15},
		{[]tuple.Value{tuple.String("user-1")}, 1, "07757365722d310001", 1},
	} {
		enc, err := tuple.AppendKey(nil, c.key...)
		if err != nil {
			t.Fatal(err)
		}
		if got := hex.EncodeToString(enc); got != c.hex {
			t.Errorf("AppendKey(%v) = %s, want %s", c.key, got, c.hex)
		}
		got, err := BucketOf(c.key, c.count)
		if err != nil || got != c.bucket {
			t.Errorf("BucketOf(%v, %d) = %d, %v; want %d", c.key, c.count, got, err, c.bucket)
		}
		if got := BucketOfEncoded(enc, c.count); got != c.bucket {
			t.Errorf("BucketOfEncoded(%x, %d) = %d, want %d", enc, c.count, got, c.bucket)
		}
	}
}

// An integer lands in one bucket whatever type its field declares.
func TestBucketOfIgnoresIntegerTypes(t *testing.T) {
	t.Parallel()
	for _, n := range []int64{0, 5, math.MaxInt64} {
		a, err1 := BucketOf([]tuple.Value{tuple.Int(n), tuple.String("x")}, DefaultBucketCount)
		b, err2 := BucketOf([]tuple.Value{tuple.Uint(uint64(n)), tuple.String("x")}, DefaultBucketCount)
		if err1 != nil || err2 != nil || a != b {
			t.Errorf("Int(%d) in bucket %d (%v), Uint(%d) in bucket %d (%v)", n, a, err1, n, b, err2)
		}
	}
}

func TestBucketOfRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key   []tuple.Value
		count uint32
		class error
		want  string
	}{
		{[]tuple.Value{tuple.Uint(1)}, 0, ErrInvalidBucketCount, "0 buckets"},
		{nil, 3000, ErrInvalidShardingKey, "the key has no parts"},
		{[]tuple.Value{tuple.Double(math.NaN())}, 3000, tuple.ErrNaN, "key part 1: NaN cannot be part of a key"},
		{make([]tuple.Value, tuple.MaxKeyParts+1), 3000, tuple.ErrLimit, "17 parts"},
	} {
		got, err := BucketOf(c.key, c.count)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("BucketOf(%v, %d) = %d, %v; want %v containing %q", c.key, c.count, got, err, c.class, c.want)
		}
		if c.count != 0 && !errors.Is(err, ErrInvalidShardingKey) {
			t.Errorf("BucketOf(%v): %v is not ErrInvalidShardingKey", c.key, err)
		}
	}
	if got := BucketOfEncoded([]byte{1}, 0); got != 0 {
		t.Errorf("BucketOfEncoded with 0 buckets = %d, want 0", got)
	}
}

func TestBucketsSpreadAndStayInRange(t *testing.T) {
	t.Parallel()
	counts := make([]int, DefaultBucketCount+1)
	const n = 300000
	for i := range n {
		key := []tuple.Value{tuple.Uint(uint64(i))}
		if i%2 == 1 {
			key = []tuple.Value{tuple.String("user-" + strconv.Itoa(i))}
		}
		b, err := BucketOf(key, DefaultBucketCount)
		if err != nil {
			t.Fatal(err)
		}
		if b < 1 || b > DefaultBucketCount {
			t.Fatalf("BucketOf(%v) = %d, out of [1, %d]", key, b, DefaultBucketCount)
		}
		counts[b]++
	}
	// 100 keys a bucket on average; a hash that lost or piled onto buckets
	// would fall far outside a third to three times that.
	for b, c := range counts[1:] {
		if c < 33 || c > 300 {
			t.Errorf("bucket %d got %d of %d keys", b+1, c, n)
		}
	}
}

func ExampleBucketOf() {
	key := []tuple.Value{tuple.Uint(7), tuple.String("sku-1")}
	bucket, err := BucketOf(key, DefaultBucketCount)
	fmt.Println(bucket, err)

	// A caller holding the encoded key gets the same bucket.
	enc, _ := tuple.AppendKey(nil, key...)
	fmt.Println(BucketOfEncoded(enc, DefaultBucketCount))

	// An integer's bucket does not depend on its declared type.
	a, _ := BucketOf([]tuple.Value{tuple.Int(5)}, DefaultBucketCount)
	b, _ := BucketOf([]tuple.Value{tuple.Uint(5)}, DefaultBucketCount)
	fmt.Println(a == b)
	// Output:
	// 1277 <nil>
	// 1277
	// true
}

func TestBucketDigestsFindAMissedOrDoubledBucket(t *testing.T) {
	t.Parallel()
	const count = DefaultBucketCount
	all := AllBucketsDigest(count)
	if all != AllBucketsDigest(count) || all == AllBucketsDigest(count-1) {
		t.Fatalf("AllBucketsDigest is not a function of the count")
	}
	// Three replicasets holding disjoint thirds: the sum is all's.
	var parts [3]uint64
	for b := uint32(1); b <= count; b++ {
		parts[b%3] += BucketDigest(b)
	}
	if got := parts[0] + parts[1] + parts[2]; got != all {
		t.Fatalf("disjoint sets sum to %x, want %x", got, all)
	}
	whole := parts[0] + parts[1] + parts[2]
	for _, c := range []struct {
		name string
		sum  uint64
	}{
		{"bucket 7 missed", whole - BucketDigest(7)},
		{"bucket 7 doubled", whole + BucketDigest(7)},
		{"bucket 7 doubled, bucket 8 missed", whole + BucketDigest(7) - BucketDigest(8)},
		{"bucket 1 doubled, bucket 3000 missed", whole + BucketDigest(1) - BucketDigest(count)},
	} {
		if c.sum == all {
			t.Errorf("%s: the digest does not change", c.name)
		}
	}
	// A bijection: no two buckets share a digest.
	seen := map[uint64]uint32{}
	for b := uint32(0); b <= 100000; b++ {
		d := BucketDigest(b)
		if o, ok := seen[d]; ok {
			t.Fatalf("buckets %d and %d share digest %x", o, b, d)
		}
		seen[d] = b
	}
}
