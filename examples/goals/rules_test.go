package goals

import (
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/shardkit/shardkit/cache/lease"
)

func TestRulesMatch(t *testing.T) {
	t.Parallel()
	r, err := NewRules([]Goal{
		{1, 10, KindContains, "/cart"},
		{1, 11, KindPrefix, "https://a.example/"},
		{1, 12, KindExact, "https://a.example/thanks"},
		{1, 13, KindRegexp, `order=\d+$`},
		{2, 20, KindContains, "/cart"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		counter uint64
		url     string
		want    []uint64
	}{
		{1, "https://a.example/cart", []uint64{10, 11}},
		{1, "https://a.example/thanks", []uint64{11, 12}},
		{1, "https://b.example/x?order=42", []uint64{13}},
		{1, "https://b.example/x?order=42a", nil},
		{2, "https://a.example/cart", []uint64{20}},
		{3, "https://a.example/cart", nil},
	}
	for _, tc := range tests {
		if got := r.Match(tc.counter, tc.url); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Match(%d, %q) = %v, want %v", tc.counter, tc.url, got, tc.want)
		}
	}
}

func TestNewRulesRejectsBadRules(t *testing.T) {
	t.Parallel()
	for _, g := range []Goal{{1, 1, "suffix", "x"}, {1, 1, KindRegexp, "("}} {
		if _, err := NewRules([]Goal{g}); !errors.Is(err, ErrBadRule) {
			t.Errorf("NewRules(%+v) = %v, want ErrBadRule", g, err)
		}
	}
}

func FuzzNewRules(f *testing.F) {
	f.Add("contains", "/a", "https://x/a")
	f.Add("regexp", `a+(`, "aaa")
	f.Add("regexp", `^h.*\?thanks$`, "https://x/?thanks")
	f.Add("exact", "", "")
	f.Fuzz(func(t *testing.T, kind, pattern, url string) {
		r, err := NewRules([]Goal{{CounterID: 1, GoalID: 7, Kind: kind, Pattern: pattern}})
		if err != nil {
			if !errors.Is(err, ErrBadRule) {
				t.Fatalf("error %v is not ErrBadRule", err)
			}
			return
		}
		if got := r.Match(1, url); len(got) > 1 || (len(got) == 1 && got[0] != 7) {
			t.Fatalf("Match = %v", got)
		}
	})
}

func TestDemoRangesPartitionCounters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ counters, shards int }{{100, 3}, {3, 3}, {10, 1}, {1000, 7}} {
		rs, err := DemoRanges(tc.counters, tc.shards)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.CheckPartition(rs); err != nil {
			t.Fatalf("DemoRanges(%d, %d) = %v: %v", tc.counters, tc.shards, rs, err)
		}
		for _, r := range rs {
			n := 0
			for c := 1; c <= tc.counters; c++ {
				if r.Contains(DemoCounterID(c)) {
					n++
				}
			}
			if n == 0 {
				t.Fatalf("DemoRanges(%d, %d): range %v has no counter", tc.counters, tc.shards, r)
			}
		}
	}
	if _, err := DemoRanges(2, 3); err == nil {
		t.Fatalf("2 counters in 3 shards accepted")
	}
}

func TestLoadRulesScansOnlyTheShard(t *testing.T) {
	t.Parallel()
	dsn, err := lease.SQLiteDSN(filepath.Join(t.TempDir(), "goals.db"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := SeedDemo(t.Context(), db, "goals", 10, 4, func(int) string { return "?" }); err != nil {
		t.Fatal(err)
	}
	all, _ := NewRules(DemoGoals(10, 4))
	r, err := LoadRules(t.Context(), db, "goals", lease.Range{Begin: 3, End: 6})
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 12 {
		t.Fatalf("loaded %d goals of counters 3..5, want 12", r.Len())
	}
	for i := range 200 {
		h := DemoHit(i, 10, 4)
		got := r.Match(h.GetCounterId(), h.GetUrl())
		want := all.Match(h.GetCounterId(), h.GetUrl())
		if !inShard(h.GetCounterId(), 3, 6) {
			want = nil
		}
		if !Equal(got, want) {
			t.Fatalf("hit %v: %v, want %v", h, got, want)
		}
	}
	if _, err := LoadRules(t.Context(), db, "goals; drop", lease.Range{}); !errors.Is(err, ErrBadRule) {
		t.Fatalf("bad table name: %v", err)
	}
}

func inShard(c, b, e uint64) bool { return c >= b && c < e }
