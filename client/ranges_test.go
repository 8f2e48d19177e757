package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

func offerIDs(ts []client.Versioned) string {
	var out []string
	for _, v := range ts {
		id, _ := v.Tuple[1].AsString()
		out = append(out, id)
	}
	return strings.Join(out, " ")
}

// A range within a bucket takes partial-key bounds, reverse and a limit;
// a bound that does not fit the key is refused, naming the bound and the
// field.
func TestRangeOptions(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "range_bounds")
	for _, id := range []string{"a1", "a2", "b1", "b2", "b3", "c1"} {
		if _, err := s.Insert(ctx, offer(7, id, 1)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.Bucket(ctx, tuple.Uint(7), tuple.String("a1"))
	if err != nil {
		t.Fatal(err)
	}
	u, str := tuple.Uint, tuple.String
	for _, c := range []struct {
		o    client.RangeOptions
		want string
		more bool
	}{
		{client.RangeOptions{Prefix: []tuple.Value{u(7)}}, "a1 a2 b1 b2 b3 c1", false},
		{client.RangeOptions{From: []tuple.Value{u(7), str("b1")}, Until: []tuple.Value{u(7), str("c1")}}, "b1 b2 b3", false},
		{client.RangeOptions{After: []tuple.Value{u(7), str("b1")}, Limit: 2, Mode: client.RO}, "b2 b3", true},
		{client.RangeOptions{Prefix: []tuple.Value{u(7)}, Reverse: true, Limit: 4}, "c1 b3 b2 b1", true},
		{client.RangeOptions{Prefix: []tuple.Value{u(7)}, Until: []tuple.Value{u(7), str("b1")}, Reverse: true}, "a2 a1", false},
		{client.RangeOptions{Prefix: []tuple.Value{u(8)}}, "", false},
	} {
		c.o.Bucket = b
		ts, more, err := s.Range(ctx, c.o)
		if err != nil || offerIDs(ts) != c.want || more != c.more {
			t.Errorf("%+v: %q more %v, %v; want %q more %v", c.o, offerIDs(ts), more, err, c.want, c.more)
		}
	}
	_, _, err = s.Range(ctx, client.RangeOptions{Bucket: b, Until: []tuple.Value{u(7), u(1)}})
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "until bound") || !strings.Contains(err.Error(), "offer") {
		t.Fatalf("an until of the wrong type: %v, want ErrInvalid naming the until bound and field offer", err)
	}
}

// A scan reads every tuple of a space once, in (bucket, key) order, in
// pages of the size asked, and a cursor resumes it where it stopped.
func TestScanReadsEveryTupleOnceAndResumes(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "scan_offers")
	want := map[string]bool{}
	for shop := range uint64(40) {
		for i := range 3 {
			id := fmt.Sprint("o", i)
			if _, err := s.Insert(ctx, offer(shop, id, 1)); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprint(shop, "/", id)] = true
		}
	}
	// A row in the last bucket: the scan ends there.
	st, err := c.Status(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var count uint32
	for _, rs := range st.GetReplicasets() {
		count += rs.GetBucketCount()
	}
	for shop := uint64(1000); ; shop++ {
		if b, err := s.Bucket(ctx, tuple.Uint(shop), tuple.String("z")); err != nil || b == count {
			if _, err := s.Insert(ctx, offer(shop, "z", 1)); err != nil {
				t.Fatal(err)
			}
			want[fmt.Sprint(shop, "/z")] = true
			break
		}
	}
	// Rows of another space in the same buckets are not the scan's.
	if _, err := offersSpace(t, c, "scan_others").Insert(ctx, offer(3, "x", 1)); err != nil {
		t.Fatal(err)
	}
	for _, page := range []int{0, 1, 7, 1000} {
		got := map[string]bool{}
		var lastBucket uint32
		var lastKey []tuple.Value
		for r, err := range s.Scan(ctx, client.ScanOptions{PageSize: page}) {
			if err != nil {
				t.Fatalf("page size %d: %v", page, err)
			}
			shop, _ := r.Tuple[0].AsUint()
			id, _ := r.Tuple[1].AsString()
			name := fmt.Sprint(shop, "/", id)
			if got[name] || !want[name] {
				t.Fatalf("page size %d: %s read twice or not written", page, name)
			}
			got[name] = true
			if wb, _ := s.Bucket(ctx, r.Tuple[0], r.Tuple[1]); wb != r.Bucket {
				t.Fatalf("%s is in bucket %d, the scan says %d", name, wb, r.Bucket)
			}
			if r.Bucket < lastBucket || r.Bucket == lastBucket && tuple.CompareKeys(r.Tuple[:2], lastKey) <= 0 {
				t.Fatalf("page size %d: %s (bucket %d) after bucket %d key %v: not in (bucket, key) order", page, name, r.Bucket, lastBucket, lastKey)
			}
			lastBucket, lastKey = r.Bucket, r.Tuple[:2]
		}
		if len(got) != len(want) {
			t.Fatalf("page size %d: %d tuples, want %d", page, len(got), len(want))
		}
	}
	// Stop after 50, resume from the last one's cursor, 30 at a time.
	got := map[string]int{}
	cursor, n := "", 0
	for {
		read := 0
		for r, err := range s.Scan(ctx, client.ScanOptions{Cursor: cursor, Limit: 50, PageSize: 30, Mode: client.RO}) {
			if err != nil {
				t.Fatal(err)
			}
			shop, _ := r.Tuple[0].AsUint()
			id, _ := r.Tuple[1].AsString()
			got[fmt.Sprint(shop, "/", id)]++
			cursor = r.Cursor()
			read++
		}
		if n++; read == 0 || n > 10 {
			break
		}
		if read > 50 {
			t.Fatalf("a scan with limit 50 read %d", read)
		}
	}
	if len(got) != len(want) || n != 4 {
		// 121 tuples: 50, 50, 21, and an empty run after the last cursor.
		t.Fatalf("resumed scans read %d tuples in %d runs, want %d in 4 (3 and an empty one)", len(got), n, len(want))
	}
	for name, k := range got {
		if k != 1 {
			t.Fatalf("%s read %d times", name, k)
		}
	}
	for _, bad := range []string{"x", "AQ", "AAAAAAE"} {
		for _, err := range s.Scan(ctx, client.ScanOptions{Cursor: bad}) {
			if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "not one a scan returned") {
				t.Fatalf("cursor %q: %v, want ErrInvalid", bad, err)
			}
		}
	}
}
