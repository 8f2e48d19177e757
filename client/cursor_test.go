package client

import (
	"errors"
	"maps"
	"strings"
	"testing"
)

func TestCursorRoundTripsAndRefusesWhatIsNotOne(t *testing.T) {
	c := Cursor{revs: map[uint32]uint64{1: 0, 2: 7, 3000: 1 << 40, 17: 3}}
	got, err := ParseCursor(c.String())
	if err != nil || !maps.Equal(got.revs, c.revs) {
		t.Fatalf("ParseCursor(%q) = %v, %v; want %v", c.String(), got.revs, err, c.revs)
	}
	if empty, err := ParseCursor(Cursor{}.String()); err != nil || empty.Buckets() != 0 {
		t.Fatalf("the empty cursor: %v, %v", empty, err)
	}
	for in, want := range map[string]string{
		"":          `does not start with "c1."`,
		"c2.AAA":    `does not start with "c1."`,
		"c1.!!":     "not base64url",
		"c1.Ag":     "bucket 1 of 2 is cut short",
		"c1.AgEB":   "bucket 2 of 2 is cut short",
		"c1.AgEBAA": "the revision of bucket 2 of 2 is cut short",
		"c1.AQAB":   "bucket 1 of 1 is out of order or out of range",
		"c1.AQEBAA": "1 bytes after its 1 buckets",
	} {
		_, err := ParseCursor(in)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCursor(%q) = %v, want a refusal saying %q", in, err, want)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	f.Add(Cursor{revs: map[uint32]uint64{1: 5, 9: 0}}.String())
	f.Add("c1.")
	f.Add("c1.AgEBAg")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCursor(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseCursor(%q): %v, not ErrInvalid", s, err)
			}
			return
		}
		again, err := ParseCursor(c.String())
		if err != nil || !maps.Equal(again.revs, c.revs) {
			t.Fatalf("ParseCursor(%q) = %v, whose String does not parse back: %v, %v", s, c.revs, again.revs, err)
		}
		for b := range c.revs {
			if b == 0 {
				t.Fatalf("ParseCursor(%q) holds bucket 0", s)
			}
		}
	})
}
