package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// A second Open of the same directory says that the lock is held, and
// only that.
func TestOpenLockedDatabase(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrLocked) || IsDamaged(err) {
		t.Fatalf("second open: %v; want ErrLocked and not damaged", err)
	}
}

// A database whose MANIFEST is gone is damaged, and the error names the
// missing file (it used to be reported like any other open failure).
func TestOpenWithoutManifestIsDamaged(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ms, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if len(ms) == 0 {
		t.Fatal("no MANIFEST written")
	}
	for _, m := range ms {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Open(dir, Options{})
	if !IsDamaged(err) || errors.Is(err, ErrLocked) {
		t.Fatalf("open without MANIFEST: %v; want damaged, not locked", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "MANIFEST") || !strings.Contains(msg, "is missing") {
		t.Fatalf("open without MANIFEST: %q does not say which file is missing", msg)
	}
}

// Corruption in a table file is returned to the reader and reported to
// OnCorruption; it used to go to Pebble's Fatalf, a panic in whichever
// goroutine found it (a compaction's, where nobody can recover it).
func TestCorruptTableIsReportedNotFatal(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if err := db.Set(fmt.Appendf(nil, "key-%05d", i), []byte(strings.Repeat("v", 100)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no table written")
	}
	for _, f := range ssts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 100; i < len(b)/2; i += 997 {
			b[i] ^= 0xff
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	var mu sync.Mutex
	var reported []error
	db, err = Open(dir, Options{OnCorruption: func(err error) {
		mu.Lock()
		reported = append(reported, err)
		mu.Unlock()
	}})
	if err != nil {
		if !IsDamaged(err) {
			t.Fatalf("open: %v; want a damaged database or a successful open", err)
		}
		return // found at open: the caller gets it
	}
	defer db.Close()
	readErr := readAll(db)
	if !IsDamaged(readErr) {
		t.Fatalf("reading a corrupt table: %v; want a corruption error", readErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) == 0 {
		t.Fatal("OnCorruption was not called")
	}
	var ce *CorruptionError
	if !errors.As(reported[0], &ce) || !strings.HasSuffix(ce.Path, ".sst") || !IsDamaged(reported[0]) {
		t.Fatalf("reported %v (%T); want a *CorruptionError naming the table", reported[0], reported[0])
	}
	if strings.Contains(reported[0].Error(), "\n") {
		t.Fatalf("reported error is not one line: %q", reported[0].Error())
	}
}

func readAll(db *pebble.DB) (err error) {
	defer RecoverFatal(&err)
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
	}
	return errors.Join(it.Error(), it.Close())
}
