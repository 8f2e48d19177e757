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

func commitRecovering(b *pebble.Batch) (err error) {
	defer RecoverFatal(&err)
	return b.Commit(pebble.Sync)
}

func deleteRangeRecovering(db *pebble.DB, lo, hi []byte) (err error) {
	defer RecoverFatal(&err)
	return db.DeleteRange(lo, hi, pebble.Sync)
}

// A write whose write-ahead log cannot be written returns, under
// RecoverFatal, a *FatalError carrying the cause, instead of panicking
// through the caller or, worse, returning as if committed. This holds for
// any write path (a batch's commit, a DeleteRange on the database).
func TestRecoverFatalReturnsPebblesFatalError(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(db *pebble.DB) error
	}{
		{"batch commit", func(db *pebble.DB) error {
			b := db.NewBatch()
			if err := b.Set([]byte("k2"), []byte("v2"), nil); err != nil {
				t.Fatal(err)
			}
			return commitRecovering(b)
		}},
		{"delete range", func(db *pebble.DB) error {
			return deleteRangeRecovering(db, []byte("a"), []byte("z"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			if err := commitRecovering(b); err != nil {
				t.Fatalf("commit on a healthy disk: %v", err)
			}
			full.Store(true)
			err = tc.write(db)
			var fe *FatalError
			if !errors.As(err, &fe) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write on a full disk = %v, want a *FatalError wrapping ENOSPC", err)
			}
		})
	}
}

func TestRecoverFatalLetsOtherPanicsThrough(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a panic that is not Pebble's fatal error was swallowed")
		}
	}()
	_ = commitRecovering(nil) // a nil batch panics in Pebble itself
}
