package storage

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestOpenWriteReopen(t *testing.T) {
	fs := vfs.NewMem()
	db, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, c, err := db.Get([]byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if string(v) != "v" {
		t.Fatalf("got %q after reopen, want %q", v, "v")
	}
}
