package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MarkerFile marks a directory as a shardkit data dir, whose contents the
// supervisor may delete. The parent writes it into a new or empty data
// dir before the first worker starts, and a rebootstrap keeps it.
const MarkerFile = ".shardkit-data-dir"

const markerText = "This directory is a shardkit instance's data dir. " +
	"Its contents are deleted when the instance rebootstraps: keep nothing else here.\n"

// PrepareDataDir makes dir safe to wipe later: it refuses an empty path,
// the root directory and the user's home directory (also through symbolic
// links); it creates a missing dir and marks a new or empty one with
// MarkerFile; it refuses a non-empty dir without the marker, whose files
// shardkit did not create. The parent calls it before the first worker
// starts: a fresh instance always rebootstraps once, after discovery.
func PrepareDataDir(dir string) error {
	resolved, err := resolveWipeable(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(resolved, 0o750); err != nil {
		return fmt.Errorf("supervisor: create data dir %q: %w", dir, err)
	}
	if _, err := os.Lstat(filepath.Join(resolved, MarkerFile)); err == nil {
		return nil
	}
	entries, err := os.ReadDir(resolved)
	if err != nil {
		return fmt.Errorf("supervisor: data dir %q: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: data dir %q is not empty and has no %s marker, so its files are not shardkit's; "+
			"the supervisor wipes the data dir on rebootstrap, so give the instance a new or empty directory with --data-dir",
			ErrUnsafeDataDir, dir, MarkerFile)
	}
	if err := os.WriteFile(filepath.Join(resolved, MarkerFile), []byte(markerText), 0o640); err != nil {
		return fmt.Errorf("supervisor: mark data dir %q: %w", dir, err)
	}
	return nil
}

func resolveWipeable(dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", fmt.Errorf("%w: the data dir is empty; set --data-dir", ErrUnsafeDataDir)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("supervisor: data dir %q: %w", dir, err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		resolved = abs
	case err != nil:
		return "", fmt.Errorf("supervisor: data dir %q: %w", dir, err)
	}
	if resolved == string(filepath.Separator) {
		return "", fmt.Errorf("%w: data dir %q is the root directory; give the instance a directory of its own with --data-dir", ErrUnsafeDataDir, dir)
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		if h, err := filepath.EvalSymlinks(home); err == nil && h == resolved {
			return "", fmt.Errorf("%w: data dir %q is your home directory; the supervisor wipes the data dir on rebootstrap, so give the instance a directory of its own with --data-dir", ErrUnsafeDataDir, dir)
		}
	}
	return resolved, nil
}

// WipeDir removes everything inside dir but MarkerFile, and keeps dir
// itself. It refuses a dir without the marker. Symbolic links inside dir
// are removed, never followed. A dir that does not exist is nothing to
// wipe.
func WipeDir(dir string) error {
	resolved, err := resolveWipeable(dir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(resolved)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("supervisor: wipe data dir %q: %w", dir, err)
	}
	if st, err := os.Lstat(filepath.Join(resolved, MarkerFile)); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%w: data dir %q has no %s marker; nothing was deleted", ErrUnsafeDataDir, dir, MarkerFile)
	}
	for _, e := range entries {
		if e.Name() == MarkerFile {
			continue
		}
		if err := os.RemoveAll(filepath.Join(resolved, e.Name())); err != nil {
			return fmt.Errorf("supervisor: wipe data dir %q: %w", dir, err)
		}
	}
	return nil
}
