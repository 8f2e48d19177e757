package numerator

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestProgressReportsEveryPhase: a run tells where it is; each phase
// begins and ends in order and, at its end, has processed every row it
// announced (the state's and the offers', duplicates included).
func TestProgressReportsEveryPhase(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		var mu sync.Mutex
		var got []Progress
		o := Options{StateType: 1, Scheme: byBusiness2, TTL: 1, ProgressEvery: time.Millisecond, ForceRebuild: force,
			Progress: func(p Progress) {
				mu.Lock()
				got = append(got, p)
				mu.Unlock()
			}}
		ks := append(keys(1, names(40, "a")...), keys(2, names(30, "b")...)...)
		s1, _, _, _ := runMem(t, nil, ks, o)
		mu.Lock()
		got = nil
		mu.Unlock()
		in := append(slices.Clone(ks[5:]), key(1, "a05"), key(3, "new")) // a duplicate, a new key
		runMem(t, s1, in, o)

		mu.Lock()
		var ends []string
		for _, p := range got {
			if p.Rows > p.Total || p.Rows < 0 {
				t.Errorf("force=%v: %+v: rows out of range", force, p)
			}
			if p.Done {
				ends = append(ends, p.Phase)
				// In-memory tables are loaded into sorters, the state too.
				want := int64(len(in) + len(s1.rows))
				if p.Rows != p.Total || p.Total != want {
					t.Errorf("force=%v: phase %s ended at %d of %d rows, want %d", force, p.Phase, p.Rows, p.Total, want)
				}
			}
		}
		mu.Unlock()
		if fmt.Sprint(ends) != fmt.Sprint([]string{PhaseLoad, PhasePlan, PhaseWrite}) {
			t.Errorf("force=%v: phases ended %v, want load, plan, write", force, ends)
		}
	}
}

func TestProgressRateAndETA(t *testing.T) {
	t.Parallel()
	p := Progress{Rows: 100, Total: 400, Elapsed: 2 * time.Second}
	if r := p.Rate(); r != 50 {
		t.Errorf("rate %v, want 50", r)
	}
	if eta, ok := p.ETA(); !ok || eta != 6*time.Second {
		t.Errorf("ETA %v %v, want 6s", eta, ok)
	}
	for _, q := range []Progress{{}, {Rows: 5, Elapsed: time.Second}, {Rows: 4, Total: 4, Elapsed: time.Second, Done: true}} {
		if _, ok := q.ETA(); ok {
			t.Errorf("ETA of %+v given", q)
		}
	}
}
