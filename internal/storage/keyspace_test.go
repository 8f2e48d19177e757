package storage

import (
	"bytes"
	"strings"
	"testing"
)

func TestKeyspacesAreDisjoint(t *testing.T) {
	ks := Keyspaces()
	for i, a := range ks {
		if a.Prefix == "" || a.Owner == "" {
			t.Errorf("keyspace %d has no prefix or owner: %+v", i, a)
		}
		for j, b := range ks {
			if i != j && strings.HasPrefix(b.Prefix, a.Prefix) {
				t.Errorf("prefix %q (%s) is a prefix of %q (%s)", a.Prefix, a.Owner, b.Prefix, b.Owner)
			}
		}
	}
}

func TestGroupPrefixesDoNotOverlap(t *testing.T) {
	a, b := GroupPrefix(PrefixData, 1), GroupPrefix(PrefixData, 256)
	if bytes.HasPrefix(a, b) || bytes.HasPrefix(b, a) || len(a) != len(PrefixData)+9 {
		t.Fatalf("group prefixes %q and %q", a, b)
	}
}
