package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// die drops o's flock as a killed process's would be, leaving its files.
func die(t *testing.T, o *Owned) {
	t.Helper()
	if err := o.lock.Close(); err != nil {
		t.Fatal(err)
	}
	o.lock = nil
}

func TestCleanDeadRemovesOnlyDeadOwners(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := filepath.Join(dir, "state")
	live, err := CreateOwned(base)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.RemoveAll() }()
	dead, err := CreateOwned(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead.Path, "part-00000.parquet"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	die(t, dead)
	other, err := CreateOwned(filepath.Join(dir, "new-docs"))
	if err != nil {
		t.Fatal(err)
	}
	die(t, other)
	old := base + ".tmp-0123456789ab" // an older version's: no lock file
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}

	removed, err := CleanDead(base)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dead.Path}) {
		t.Fatalf("CleanDead removed %v, want only the dead owner's %s", removed, dead.Path)
	}
	if exists(t, dead.Path) || exists(t, dead.Path+lockSuffix) {
		t.Fatalf("the dead owner's files are still there")
	}
	for _, p := range []string{live.Path, live.Path + lockSuffix, other.Path, old} {
		if !exists(t, p) {
			t.Fatalf("%s was removed", p)
		}
	}
	// CleanDeadIn takes any base, and still not the live one.
	removed, err = CleanDeadIn(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{other.Path}) || !exists(t, live.Path) || !exists(t, old) {
		t.Fatalf("CleanDeadIn removed %v, want only %s", removed, other.Path)
	}
}

func TestOwnedReleasedAfterRenameLeavesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := CreateOwned(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(o.Path, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := o.Release(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "out" {
		t.Fatalf("directory holds %v, want only out", entries)
	}
	if err := o.Release(); err != nil {
		t.Fatalf("a second Release: %v", err)
	}
}

func TestOrphanLockFileIsRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o, err := CreateOwned(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	// Died after publishing the directory, before removing its lock file.
	if err := os.Rename(o.Path, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	die(t, o)
	removed, err := CleanDeadIn(dir)
	if err != nil || len(removed) != 1 || exists(t, o.Path+lockSuffix) || !exists(t, filepath.Join(dir, "out")) {
		t.Fatalf("CleanDeadIn = %v, %v; want the orphan lock file removed and the output kept", removed, err)
	}
}

func TestCleanDeadOfAMissingDirectory(t *testing.T) {
	t.Parallel()
	removed, err := CleanDead(filepath.Join(t.TempDir(), "no", "such", "out"))
	if err != nil || removed != nil {
		t.Fatalf("CleanDead in a missing directory = %v, %v", removed, err)
	}
}
