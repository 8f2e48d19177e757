package numerator

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/shardkit/shardkit/numerator/internal/fsutil"
)

// CopyTable copies a table (a Parquet file or a directory of part files) to
// dst, which must not exist: a master copies the last consistent state into
// its own working location before a run (N7). The copy is written under a
// temporary name, synced and renamed into place.
func CopyTable(src, dst string) error {
	parts, err := tableParts(src)
	if err != nil {
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%w: %s", ErrOutputExists, dst)
	}
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	if !st.IsDir() {
		return copyFile(src, dst)
	}
	// A dead run's half-made copy is removed; this one is owned by this
	// process until it is renamed into place.
	if _, err := fsutil.CleanDead(dst); err != nil {
		return fmt.Errorf("numerator: remove a dead run's copy next to %s: %w", dst, err)
	}
	tmp, err := fsutil.CreateOwned(dst)
	if err != nil {
		return fmt.Errorf("numerator: copy to %s: %w", dst, err)
	}
	for _, p := range parts {
		if err := copyFile(p, filepath.Join(tmp.Path, filepath.Base(p))); err != nil {
			return errors.Join(err, tmp.RemoveAll())
		}
	}
	if err := fsutil.SyncDir(tmp.Path); err != nil {
		return errors.Join(err, tmp.RemoveAll())
	}
	if err := os.Rename(tmp.Path, dst); err != nil {
		return errors.Join(err, tmp.RemoveAll())
	}
	if err := tmp.Release(); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(dst))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("numerator: copy to %s: %w", dst, err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("numerator: copy %s to %s: %w", src, dst, err)
	}
	return nil
}
