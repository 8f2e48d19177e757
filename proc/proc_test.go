package proc

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// counts splits buckets 1..count among n replicasets (bucket b on b%n)
// with one tuple per bucket, as count_buckets answers.
func counts(count uint32, n int) []tuple.Tuple {
	out := make([]tuple.Tuple, n)
	acs := make([]ActiveCount, n)
	for b := uint32(1); b <= count; b++ {
		ac := &acs[int(b)%n]
		ac.Tuples++
		ac.Buckets++
		ac.Digest += sharding.BucketDigest(b)
	}
	for i, ac := range acs {
		out[i] = tuple.Tuple{tuple.Uint(ac.Tuples), tuple.Uint(ac.Buckets), tuple.Uint(ac.Digest)}
	}
	return out
}

func TestSumActiveCountsAddsOnlyCountsThatCoverEveryBucketOnce(t *testing.T) {
	t.Parallel()
	const count = 300
	if n, err := SumActiveCounts(counts(count, 3), count); n != count || err != nil {
		t.Fatalf("three disjoint thirds: %d, %v; want %d, nil", n, err, count)
	}
	// bucket 7 is on replicaset 1 (7%3): counted also by replicaset 2 (a
	// move seen on both sides), or by nobody (seen on neither).
	doubled, missed := counts(count, 3), counts(count, 3)
	doubled[2] = tuple.Tuple{tuple.Uint(101), tuple.Uint(101), tuple.Uint(mustUint(doubled[2][2]) + sharding.BucketDigest(7))}
	missed[1] = tuple.Tuple{tuple.Uint(99), tuple.Uint(99), tuple.Uint(mustUint(missed[1][2]) - sharding.BucketDigest(7))}
	// Bucket 7 doubled and bucket 8 missed: the bucket total is right.
	swapped := counts(count, 3)
	swapped[2] = tuple.Tuple{tuple.Uint(101), tuple.Uint(101), tuple.Uint(mustUint(swapped[2][2]) + sharding.BucketDigest(7))}
	swapped[2][0], swapped[2][1] = tuple.Uint(100), tuple.Uint(100)
	swapped[2][2] = tuple.Uint(mustUint(swapped[2][2]) - sharding.BucketDigest(8))
	for name, rs := range map[string][]tuple.Tuple{"doubled": doubled, "missed": missed, "swapped": swapped, "a replicaset left out": counts(count, 3)[:2]} {
		if _, err := SumActiveCounts(rs, count); !errors.Is(err, ErrCountInFlux) || !strings.Contains(err.Error(), "count again") {
			t.Errorf("%s: %v, want ErrCountInFlux", name, err)
		}
	}
	for _, c := range []struct {
		name string
		rs   []tuple.Tuple
		want string
	}{
		{"two values", []tuple.Tuple{{tuple.Uint(1), tuple.Uint(2)}}, "result 1 has 2 values, want 3"},
		{"a string", []tuple.Tuple{{tuple.Uint(1), tuple.String("x"), tuple.Uint(2)}}, `value 2 is "x", want an unsigned integer`},
	} {
		if _, err := SumActiveCounts(c.rs, count); err == nil || errors.Is(err, ErrCountInFlux) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

func mustUint(v tuple.Value) uint64 {
	u, _ := v.AsUint()
	return u
}
