package numerator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/sharding"
)

// TestCompatibleTruthTable checks every combination of equal/different T, S,
// V and state generation below/equal/above the data's (N6).
func TestCompatibleTruthTable(t *testing.T) {
	t.Parallel()
	data := Version{Type: 5, Scheme: 2, Rebuild: 7, Generation: 10}
	for _, sameT := range []bool{true, false} {
		for _, sameS := range []bool{true, false} {
			for _, sameV := range []bool{true, false} {
				for _, g := range []struct {
					name string
					gen  uint64
				}{{"G1<G2", 9}, {"G1=G2", 10}, {"G1>G2", 11}} {
					state := data
					state.Generation = g.gen
					if !sameT {
						state.Type++
					}
					if !sameS {
						state.Scheme++
					}
					if !sameV {
						state.Rebuild++
					}
					want := sameT && sameS && sameV && g.gen >= data.Generation
					if got := Compatible(state, data); got != want {
						t.Errorf("sameT=%v sameS=%v sameV=%v %s: Compatible(%s, %s) = %v, want %v",
							sameT, sameS, sameV, g.name, state, data, got, want)
					}
				}
			}
		}
	}
	// An older V with a larger G is still incompatible: V is compared, not ordered.
	if Compatible(Version{1, 0, 1, 99}, Version{1, 0, 2, 0}) {
		t.Error("state with V=1 judged compatible with data built on V=2")
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Version
		ok   bool
	}{
		{"1.0.3.12", Version{1, 0, 3, 12}, true},
		{"0.0.0.0", Version{}, true},
		{"4294967295.4294967295.18446744073709551615.18446744073709551615", Version{^uint32(0), 4294967295, ^uint64(0), ^uint64(0)}, true},
		{"4294967296.0.0.0", Version{}, false},
		{"1.4294967296.0.0", Version{}, false},
		{"1.0.0.18446744073709551616", Version{}, false},
		{"1.0.0", Version{}, false},
		{"1.0.0.0.0", Version{}, false},
		{"", Version{}, false},
		{"1..0.0", Version{}, false},
		{"01.0.0.0", Version{}, false},
		{"+1.0.0.0", Version{}, false},
		{"-1.0.0.0", Version{}, false},
		{"1.0.0.0 ", Version{}, false},
		{"a.b.c.d", Version{}, false},
	}
	for _, tt := range tests {
		got, err := ParseVersion(tt.in)
		if tt.ok != (err == nil) {
			t.Errorf("ParseVersion(%q) error = %v, want ok=%v", tt.in, err, tt.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrBadVersion) {
				t.Errorf("ParseVersion(%q) error %v does not wrap ErrBadVersion", tt.in, err)
			}
			continue
		}
		if got != tt.want || got.String() != tt.in {
			t.Errorf("ParseVersion(%q) = %v (%s), want %v", tt.in, got, got, tt.want)
		}
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.0.3.12", "0.0.0.0", "01.0.0.0", "1.2.3", "9999999999.1.1.1", "1.0.0.-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if !errors.Is(err, ErrBadVersion) {
				t.Fatalf("ParseVersion(%q) error %v does not wrap ErrBadVersion", s, err)
			}
			return
		}
		// Only the canonical form parses, so formatting gives the input back.
		if v.String() != s {
			t.Fatalf("ParseVersion(%q) = %s: not canonical", s, v)
		}
		if !Compatible(v, v) {
			t.Fatalf("version %s not compatible with itself", v)
		}
	})
}

// TestCompatibilityAcrossRuns is the truth table of what a run does to the
// compatibility of data built on its input state (N6): from one state of
// 100 keys, each row runs one generation and says whether it is refused,
// and if not whether data built on the input state may be used with the
// output (V and G as they move).
func TestCompatibilityAcrossRuns(t *testing.T) {
	t.Parallel()
	base := Options{StateType: 1, Scheme: single, TTL: 3, RebuildThreshold: 1}
	all := sortedKeys(keys(1, names(100, "k")...)) // ids 0..99 in this order
	s1, _, _, _ := runMem(t, nil, all, base)
	without := func(from, to int) []sharding.OfferKey {
		return slices.Delete(slices.Clone(all), from, to)
	}
	tests := []struct {
		name       string
		opts       func(o *Options)
		offers     []sharding.OfferKey
		refused    error
		compatible bool
	}{
		{name: "the same offers: G stays", offers: all, compatible: true},
		{name: "new keys: G+1", offers: append(slices.Clone(all), keys(2, "n1", "n2")...), compatible: true},
		{name: "30% absent, within TTL: kept", offers: without(0, 30), compatible: true},
		{name: "60% absent: refused", offers: without(0, 60), refused: ErrTooManyDropped},
		{name: "60% absent, allowed, within TTL: kept", opts: func(o *Options) { o.AllowDropFraction = 1 }, offers: without(0, 60), compatible: true},
		{name: "empty: refused", offers: nil, refused: ErrEmptyInput},
		{name: "empty, allowed, within TTL: kept", opts: func(o *Options) { o.AllowEmpty = true }, offers: nil, compatible: true},
		{name: "forced rebuild: V+1", opts: func(o *Options) { o.ForceRebuild = true }, offers: all},
		{name: "automatic rebuild (holes): V+1", opts: func(o *Options) { o.TTL, o.RebuildThreshold = 0, 0.2 }, offers: without(10, 40)},
		{name: "60% of the ids freed at once (no holes: the top ids): V+1", opts: func(o *Options) { o.TTL, o.AllowDropFraction = 0, 1 }, offers: without(40, 100)},
		{name: "40% of the ids freed at once: V stays", opts: func(o *Options) { o.TTL = 0 }, offers: without(60, 100), compatible: true},
	}
	for _, tc := range tests {
		o := base
		if tc.opts != nil {
			tc.opts(&o)
		}
		s2, res, _, _, err := runMemErr(s1, tc.offers, o)
		if tc.refused != nil {
			if !errors.Is(err, tc.refused) || !strings.Contains(err.Error(), "--allow-") {
				t.Errorf("%s: %v, want a refusal wrapping %v that names the flag allowing it", tc.name, err, tc.refused)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := Compatible(s2.meta.Version, s1.meta.Version); got != tc.compatible {
			t.Errorf("%s: Compatible(%s, %s) = %v, want %v (rebuilt %d, renumbered %v)",
				tc.name, s2.meta.Version, s1.meta.Version, got, tc.compatible, res.Rebuilt, res.Renumbered)
		}
	}
}

// TestEmptyGenerationsCannotRenumberSilently: empty generations are
// refused; allowed anyway, the one that expires every doc bumps V, so that
// after the real offers return (taking ids 0.. again, most of them another
// key's) no data built on the old state passes for compatible.
func TestEmptyGenerationsCannotRenumberSilently(t *testing.T) {
	t.Parallel()
	o := Options{StateType: 1, Scheme: single, TTL: 3}
	all := keys(1, names(200, "k")...)
	first, _, _, _ := runMem(t, nil, all[:150], o)
	s, _, _, _ := runMem(t, first, all, o) // 1.0.0.1, as in the report
	before := s.assignment()
	if _, _, _, _, err := runMemErr(s, nil, o); !errors.Is(err, ErrEmptyInput) {
		t.Fatalf("an empty generation: %v, want ErrEmptyInput", err)
	}
	allowed := o
	allowed.AllowEmpty = true
	s, _, _, _ = runMem(t, s, nil, allowed) // run 3: nothing expires yet
	// After an empty generation, an input with 10% of the offers is
	// measured against the whole state (the previous generation had none).
	if _, _, _, _, err := runMemErr(s, all[:20], o); !errors.Is(err, ErrTooManyDropped) || !strings.Contains(err.Error(), "of the input state") {
		t.Fatalf("a 10%% input after an empty generation: %v, want ErrTooManyDropped against the input state", err)
	}
	var res Result
	for len(s.rows) > 0 {
		prev := s
		s, res, _, _ = runMem(t, s, nil, allowed)
		if len(s.rows) == 0 && (!res.Renumbered || Compatible(s.meta.Version, prev.meta.Version)) {
			t.Fatalf("the run that expired every doc: renumbered %v, version %s -> %s; want V+1", res.Renumbered, prev.meta.Version, s.meta.Version)
		}
		if s.meta.Run > 10 {
			t.Fatalf("the state still holds %d rows after run %d (TTL %d)", len(s.rows), s.meta.Run, o.TTL)
		}
	}
	back, _, _, _ := runMem(t, s, all, o)
	moved := 0
	for k, p := range back.assignment() {
		if before[k] != p {
			moved++
		}
	}
	if moved == 0 || Compatible(back.meta.Version, first.meta.Version) {
		t.Fatalf("%d of %d keys renumbered, version %s after %s: want renumbered keys and an incompatible version",
			moved, len(all), back.meta.Version, first.meta.Version)
	}
}
