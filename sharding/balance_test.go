package sharding

import (
	"math"
	"testing"
)

func TestTargetsByWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups []Group
		total  int
		want   map[string]int
	}{
		{"vshard: weights 50/20/30, 100 buckets", []Group{{ID: "a", Weight: 50}, {ID: "b", Weight: 20}, {ID: "c", Weight: 30}}, 100,
			map[string]int{"a": 50, "b": 20, "c": 30}},
		{"equal weights, 3000 over 2", []Group{{ID: "r1", Weight: 1, Buckets: 3000}, {ID: "r2", Weight: 1}}, 3000,
			map[string]int{"r1": 1500, "r2": 1500}},
		{"rounding: 3000 over 7, the surplus trimmed", []Group{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}, {ID: "d", Weight: 1},
			{ID: "e", Weight: 1}, {ID: "f", Weight: 1}, {ID: "g", Weight: 1}}, 3000,
			map[string]int{"a": 428, "b": 428, "c": 428, "d": 429, "e": 429, "f": 429, "g": 429}},
		{"weight 0 drains", []Group{{ID: "a", Weight: 1, Buckets: 100}, {ID: "b", Weight: 0, Buckets: 200}}, 300,
			map[string]int{"a": 300, "b": 0}},
		{"vshard RFC: 150 / 150 (120 pinned) / 0 ends at 90 / 120 / 90", []Group{{ID: "a", Weight: 1, Buckets: 150}, {ID: "b", Weight: 1, Buckets: 150, Pinned: 120},
			{ID: "c", Weight: 1}}, 300, map[string]int{"a": 90, "b": 120, "c": 90}},
		{"every weight 0 leaves everything", []Group{{ID: "a", Buckets: 10}, {ID: "b", Buckets: 5}}, 15,
			map[string]int{"a": 10, "b": 5}},
	} {
		got := Targets(tc.groups, tc.total)
		sum := 0
		for id, n := range tc.want {
			if got[id] != n {
				t.Errorf("%s: %s gets %d, want %d (all: %v)", tc.name, id, got[id], n, got)
			}
			sum += got[id]
		}
		if sum != tc.total {
			t.Errorf("%s: targets sum to %d, want %d", tc.name, sum, tc.total)
		}
	}
}

func TestDisbalanceAndThreshold(t *testing.T) {
	if d := Disbalance(1515, 1500); math.Abs(d-1) > 1e-9 {
		t.Fatalf("1515 against 1500: %v%%, want 1%%", d)
	}
	if d := Disbalance(10, 0); !math.IsInf(d, 1) {
		t.Fatalf("buckets on a weight-0 group: %v, want +Inf", d)
	}
	if d := Disbalance(0, 0); d != 0 {
		t.Fatalf("empty and nothing wanted: %v", d)
	}
}

func TestRoutesGoFromOverToUnder(t *testing.T) {
	groups := []Group{{ID: "r1", Buckets: 3000}, {ID: "r2"}, {ID: "r3"}}
	routes := Routes(groups, map[string]int{"r1": 1000, "r2": 1000, "r3": 1000})
	if len(routes) != 2 || routes[0] != (Route{"r1", "r2", 1000}) || routes[1] != (Route{"r1", "r3", 1000}) {
		t.Fatalf("routes %v", routes)
	}
	// Pinned buckets never leave.
	pinned := []Group{{ID: "a", Buckets: 10, Pinned: 8}, {ID: "b"}}
	if r := Routes(pinned, map[string]int{"a": 5, "b": 5}); len(r) != 1 || r[0].Count != 2 {
		t.Fatalf("routes with pins %v, want 2 from a", r)
	}
}
