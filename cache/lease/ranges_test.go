package lease

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestSplitEqualPartitions(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 3, 7, 16, 1000} {
		rs, err := SplitEqual(n)
		if err != nil {
			t.Fatalf("SplitEqual(%d): %v", n, err)
		}
		if len(rs) != n {
			t.Fatalf("SplitEqual(%d) gave %d ranges", n, len(rs))
		}
		if err := CheckPartition(rs); err != nil {
			t.Fatalf("SplitEqual(%d) is no partition: %v", n, err)
		}
	}
	rs, _ := SplitEqual(2)
	if want := []Range{{0, 1 << 63}, {1 << 63, 0}}; !reflect.DeepEqual(rs, want) {
		t.Fatalf("SplitEqual(2) = %v, want %v", rs, want)
	}
	for _, n := range []int{0, -1, maxShards + 1} {
		if _, err := SplitEqual(n); !errors.Is(err, ErrInvalid) {
			t.Errorf("SplitEqual(%d) error %v, want ErrInvalid", n, err)
		}
	}
}

func TestRangeContainsAndOverlaps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    Range
		key  uint64
		want bool
	}{
		{Range{0, 0}, 0, true},
		{Range{0, 0}, math.MaxUint64, true},
		{Range{10, 20}, 9, false},
		{Range{10, 20}, 10, true},
		{Range{10, 20}, 19, true},
		{Range{10, 20}, 20, false},
		{Range{10, 0}, math.MaxUint64, true},
		{Range{10, 0}, 9, false},
	}
	for _, tc := range tests {
		if got := tc.r.Contains(tc.key); got != tc.want {
			t.Errorf("%v.Contains(%d) = %v, want %v", tc.r, tc.key, got, tc.want)
		}
	}
	overlaps := []struct {
		a, b Range
		want bool
	}{
		{Range{0, 10}, Range{10, 20}, false},
		{Range{0, 11}, Range{10, 20}, true},
		{Range{0, 0}, Range{5, 6}, true},
		{Range{5, 0}, Range{0, 5}, false},
		{Range{5, 0}, Range{0, 6}, true},
		{Range{5, 0}, Range{7, 0}, true},
	}
	for _, tc := range overlaps {
		if got := tc.a.Overlaps(tc.b); got != tc.want {
			t.Errorf("%v.Overlaps(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Overlaps(tc.a); got != tc.want {
			t.Errorf("%v.Overlaps(%v) = %v, want %v", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestParseRanges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []Range
		ok   bool
	}{
		{"two", "# counters\n0 1000\n\n1000 max\n", []Range{{0, 1000}, {1000, 0}}, true},
		{"numeric max", "0 18446744073709551616\n", []Range{{0, 0}}, true},
		{"gap", "0 10\n11 max\n", nil, false},
		{"overlap", "0 10\n9 max\n", nil, false},
		{"not from zero", "1 max\n", nil, false},
		{"not to max", "0 10\n10 20\n", nil, false},
		{"empty range", "0 0\n", nil, false},
		{"bad number", "0 x\n", nil, false},
		{"three fields", "0 10 20\n", nil, false},
		{"empty file", "", nil, false},
		{"negative", "-1 max\n", nil, false},
		{"too big", "0 18446744073709551617\n", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRanges([]byte(tc.in))
			if tc.ok != (err == nil) {
				t.Fatalf("ParseRanges(%q) = %v, %v; ok want %v", tc.in, got, err, tc.ok)
			}
			if !tc.ok {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v is not ErrInvalid", err)
				}
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseRanges = %v, want %v", got, tc.want)
			}
			back, err := ParseRanges(FormatRanges(got))
			if err != nil || !reflect.DeepEqual(back, got) {
				t.Fatalf("round trip: %v, %v", back, err)
			}
		})
	}
}

func FuzzParseRanges(f *testing.F) {
	f.Add([]byte("0 1000\n1000 max\n"))
	f.Add([]byte("# x\n0 18446744073709551616\n"))
	f.Add([]byte("0 5\n5 7\n7 max"))
	f.Add([]byte("0 \x00\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := ParseRanges(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if err := CheckPartition(rs); err != nil {
			t.Fatalf("accepted ranges are no partition: %v", err)
		}
		back, err := ParseRanges(FormatRanges(rs))
		if err != nil || !reflect.DeepEqual(back, rs) {
			t.Fatalf("round trip of %v: %v, %v", rs, back, err)
		}
	})
}
