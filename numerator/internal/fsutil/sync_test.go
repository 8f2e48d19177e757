package fsutil

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"
)

func TestSyncDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := SyncDir(dir); err != nil {
		t.Fatalf("SyncDir(%s): %v", dir, err)
	}
	missing := filepath.Join(dir, "missing")
	if err := SyncDir(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SyncDir of a missing directory = %v, want fs.ErrNotExist", err)
	}
}
