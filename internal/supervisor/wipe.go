package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// CheckWipeable says whether WipeDir would wipe dir. It refuses an empty
// path, the root directory and the user's home directory (also through
// symbolic links). The parent checks it before the first worker starts:
// a fresh instance always rebootstraps once, after discovery.
func CheckWipeable(dir string) error {
	_, err := resolveWipeable(dir)
	return err
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
		resolved = abs // created later by the worker; nothing to wipe yet
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

// WipeDir removes everything inside dir and keeps dir itself. Symbolic
// links inside dir are removed, never followed. A dir that does not exist
// is nothing to wipe.
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
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(resolved, e.Name())); err != nil {
			return fmt.Errorf("supervisor: wipe data dir %q: %w", dir, err)
		}
	}
	return nil
}
