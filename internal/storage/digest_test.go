package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Two databases with the same keys and values under a prefix have one
// digest whatever else they hold; a value changed, a key added or the
// bytes split differently between a key and its value change it.
func TestDigestTellsApartWhatAPrefixHolds(t *testing.T) {
	open := func(kvs ...string) *pebble.DB {
		t.Helper()
		db, err := Open("db", Options{FS: vfs.NewMem()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		for i := 0; i < len(kvs); i += 2 {
			if err := db.Set([]byte(kvs[i]), []byte(kvs[i+1]), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
		return db
	}
	digest := func(db *pebble.DB) uint64 {
		t.Helper()
		d, err := Digest(db, []byte("m/"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := digest(open("m/a", "1", "m/b", "2"))
	if d := digest(open("m/b", "2", "m/a", "1", "d/x", "other", "n/", "past the prefix")); d != base {
		t.Errorf("the same keys under m/, written in another order beside others: %x, want %x", d, base)
	}
	for name, db := range map[string]*pebble.DB{
		"a value changed": open("m/a", "1", "m/b", "3"),
		"a key added":     open("m/a", "1", "m/b", "2", "m/c", ""),
		"a key removed":   open("m/a", "1"),
		"split otherwise": open("m/a1", "", "m/b", "2"),
	} {
		if d := digest(db); d == base {
			t.Errorf("%s: the same digest %x", name, d)
		}
	}
}
