package storage

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func openMem(t *testing.T) *pebble.DB {
	t.Helper()
	db, err := Open("db", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func dump(t *testing.T, db *pebble.DB, prefix []byte) map[string]string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: PrefixEnd(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	m := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key())] = string(it.Value())
	}
	return m
}

func TestPrefixSnapshotRoundTrip(t *testing.T) {
	src, dst := openMem(t), openMem(t)
	for i := range 1000 {
		if err := src.Set(fmt.Appendf(nil, "m/k%04d", i), bytes.Repeat([]byte{byte(i)}, i%300), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	_ = src.Set([]byte("other/x"), []byte("not in the snapshot"), pebble.NoSync)
	_ = dst.Set([]byte("m/stale"), []byte("must go"), pebble.NoSync)
	_ = dst.Set([]byte("n/keep"), []byte("outside the prefix"), pebble.NoSync)
	var buf bytes.Buffer
	if err := WritePrefixSnapshot(context.Background(), src, []byte("m/"), &buf); err != nil {
		t.Fatal(err)
	}
	if err := RestorePrefixSnapshot(context.Background(), dst, []byte("m/"), bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	want, got := dump(t, src, []byte("m/")), dump(t, dst, []byte("m/"))
	if len(got) != len(want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("key %s differs after restore", k)
		}
	}
	if dump(t, dst, []byte("n/"))["n/keep"] != "outside the prefix" {
		t.Fatal("restore touched keys outside its prefix")
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ in, want []byte }{
		{[]byte("m/"), []byte("m0")},
		{[]byte{'a', 0xff}, []byte{'b'}},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := PrefixEnd(tc.in); !bytes.Equal(got, tc.want) {
			t.Errorf("PrefixEnd(%x) = %x, want %x", tc.in, got, tc.want)
		}
	}
}

// A snapshot arrives from another node: garbage must be refused, never
// panic, never write outside the prefix.
func FuzzRestorePrefixSnapshot(f *testing.F) {
	var buf bytes.Buffer
	src, err := Open("db", Options{FS: vfs.NewMem()})
	if err != nil {
		f.Fatal(err)
	}
	_ = src.Set([]byte("m/a"), []byte("1"), pebble.NoSync)
	_ = WritePrefixSnapshot(context.Background(), src, []byte("m/"), &buf)
	_ = src.Close()
	f.Add(buf.Bytes())
	f.Add([]byte{0x05, 'a'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	db, err := Open("db", Options{FS: vfs.NewMem()})
	if err != nil {
		f.Fatal(err)
	}
	defer db.Close()
	_ = db.Set([]byte("z/outside"), []byte("x"), pebble.NoSync)
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = RestorePrefixSnapshot(context.Background(), db, []byte("m/"), bytes.NewReader(b))
		v, c, err := db.Get([]byte("z/outside"))
		if err != nil || string(v) != "x" {
			t.Fatalf("restore changed a key outside its prefix: %q %v", v, err)
		}
		_ = c.Close()
	})
}
