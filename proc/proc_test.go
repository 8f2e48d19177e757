package proc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/sharding"
	"github.com/shardkit/shardkit/tuple"
)

// counts splits buckets 1..count among n replicasets (bucket b on b%n)
// with one tuple per bucket, as count_buckets answers.
func counts(count uint32, n int) []tuple.Tuple {
	hcs := make([]HeldCount, n)
	for b := uint32(1); b <= count; b++ {
		hcs[int(b)%n].add(b, 1)
	}
	out := make([]tuple.Tuple, n)
	for i := range hcs {
		out[i] = hcs[i].tuple()
	}
	return out
}

// add counts bucket b with its tuples in hc (a negative number: takes
// the bucket out).
func (hc *HeldCount) add(b uint32, tuples int) {
	sign := uint64(1)
	if tuples < 0 {
		sign = ^uint64(0) // -1 mod 2^64
	}
	hc.Tuples += uint64(tuples)
	hc.Buckets += sign
	hc.Digest += sign * sharding.BucketDigest(b)
}

func (hc HeldCount) tuple() tuple.Tuple {
	return tuple.Tuple{tuple.Uint(hc.Tuples), tuple.Uint(hc.Buckets), tuple.Uint(hc.Digest)}
}

// heldOf reads a count_buckets result back.
func heldOf(t tuple.Tuple) HeldCount {
	var v [3]uint64
	for i := range v {
		v[i], _ = t[i].AsUint()
	}
	return HeldCount{Tuples: v[0], Buckets: v[1], Digest: v[2]}
}

// moved returns rs with replicaset i counting bucket b too (tuples > 0)
// or no more (tuples < 0).
func moved(rs []tuple.Tuple, i int, b uint32, tuples int) []tuple.Tuple {
	hc := heldOf(rs[i])
	hc.add(b, tuples)
	rs[i] = hc.tuple()
	return rs
}

func TestSumHeldCountsAddsOnlyCountsThatCoverEveryBucketOnce(t *testing.T) {
	t.Parallel()
	const count = 300
	if n, err := SumHeldCounts(counts(count, 3), count); n != count || err != nil {
		t.Fatalf("three disjoint thirds: %d, %v; want %d, nil", n, err, count)
	}
	// Bucket 7 is on replicaset 1 (7%3).
	for name, rs := range map[string][]tuple.Tuple{
		"bucket 7 seen on both sides of its move":                       moved(counts(count, 3), 2, 7, 1),
		"bucket 7 seen on neither side":                                 moved(counts(count, 3), 1, 7, -1),
		"bucket 7 doubled, bucket 8 missed (the bucket total is right)": moved(moved(counts(count, 3), 2, 7, 1), 2, 8, -1),
		"a replicaset left out":                                         counts(count, 3)[:2],
	} {
		if _, err := SumHeldCounts(rs, count); !errors.Is(err, ErrCountInFlux) || !strings.Contains(err.Error(), "count again") {
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
		if _, err := SumHeldCounts(c.rs, count); !errors.Is(err, ErrBadCount) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadCount with %q", c.name, err, c.want)
		}
	}
}

func TestCountClusterCountsAgainWhileABucketMoves(t *testing.T) {
	t.Parallel()
	const count = 30
	// Two counts spoiled by a move (bucket 4 on neither side, then on
	// both), then a whole one.
	answers := [][]tuple.Tuple{moved(counts(count, 2), 0, 4, -1), moved(counts(count, 2), 1, 4, 1), counts(count, 2)}
	calls := 0
	n, err := CountCluster(t.Context(), count, func(context.Context) ([]tuple.Tuple, error) {
		calls++
		return answers[min(calls, len(answers))-1], nil
	})
	if n != count || err != nil || calls != 3 {
		t.Fatalf("CountCluster = %d, %v after %d counts; want %d, nil after 3", n, err, calls, count)
	}
	// Buckets that keep moving: the deadline ends it, saying so.
	ctx, cancel := context.WithTimeout(t.Context(), 3*CountRetryWait)
	defer cancel()
	_, err = CountCluster(ctx, count, func(context.Context) ([]tuple.Tuple, error) { return answers[0], nil })
	if !errors.Is(err, ErrCountInFlux) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("counts that never cover every bucket once: %v, want ErrCountInFlux and the deadline", err)
	}
	// A failed map-call is the count's failure, not counted again.
	failed := errors.New("replicaset r2 did not answer")
	calls = 0
	if _, err := CountCluster(t.Context(), count, func(context.Context) ([]tuple.Tuple, error) { calls++; return nil, failed }); !errors.Is(err, failed) || calls != 1 {
		t.Errorf("a failed map-call: %v after %d calls, want it after 1", err, calls)
	}
}
