package numerator

import (
	"errors"
	"testing"
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
