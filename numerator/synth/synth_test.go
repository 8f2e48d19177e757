package synth

import (
	"testing"
)

func TestGenerationsChurnAndFlap(t *testing.T) {
	t.Parallel()
	p := Params{Offers: 10000, Churn: 0.1, Flap: 0.05}
	sets := make([]map[uint64]bool, 3)
	for g := range sets {
		sets[g] = map[uint64]bool{}
		if err := Present(p, int64(g), func(i uint64) error { sets[g][i] = true; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if len(sets[0]) != 10000 || len(sets[2]) != 10000 {
		t.Fatalf("even generations have %d and %d offers, want 10000", len(sets[0]), len(sets[2]))
	}
	if n := len(sets[1]); n >= 10000 || n < 9000 {
		t.Fatalf("odd generation has %d offers: want ~5%% flapped out", n)
	}
	returned, gone := 0, 0
	for i := range sets[0] {
		if !sets[1][i] && sets[2][i] {
			returned++
		}
		if !sets[2][i] {
			gone++
		}
	}
	if returned == 0 || gone != 2000 {
		t.Fatalf("returned %d, gone after two generations %d (want >0 and 2000)", returned, gone)
	}
	if a, b := Offer(5), Offer(5); a != b || a == Offer(6) {
		t.Fatal("Offer is not a function of its number")
	}
}
