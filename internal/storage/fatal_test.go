package storage

import (
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// A commit whose write-ahead log cannot be written returns a *FatalError
// carrying the cause, instead of panicking through the caller or, worse,
// returning as if committed.
func TestCommitReturnsPebblesFatalError(t *testing.T) {
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSync) {
			return syscall.ENOSPC
		}
		return nil
	}))
	db, err := Open("db", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	b := db.NewBatch()
	if err := b.Set([]byte("k"), []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	if err := Commit(b, pebble.Sync); err != nil {
		t.Fatalf("commit on a healthy disk: %v", err)
	}
	full.Store(true)
	b = db.NewBatch()
	if err := b.Set([]byte("k2"), []byte("v2"), nil); err != nil {
		t.Fatal(err)
	}
	err = Commit(b, pebble.Sync)
	var fe *FatalError
	if !errors.As(err, &fe) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("commit on a full disk = %v, want a *FatalError wrapping ENOSPC", err)
	}
}

func TestCommitLetsOtherPanicsThrough(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a panic that is not Pebble's fatal error was swallowed")
		}
	}()
	_ = Commit(nil, pebble.Sync) // a nil batch panics in Pebble itself
}
