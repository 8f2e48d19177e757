package fsutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// A working directory of a run is owned by the process that made it: next
// to the directory NAME (NAME = BASE.tmp-HEX) is the lock file NAME.lock,
// which the owner holds with an exclusive flock for as long as it works.
// The kernel drops the flock when the owner dies, however it dies (kill
// -9 too), so a later process that can take the flock knows the directory
// is a dead run's leftover and may remove it. The lock file is created
// before the directory and removed after it (renamed into place or
// removed), so a directory of this kind never exists without its lock
// file while its owner lives.

// ownedName matches the names BASE.tmp-HEX (12 hex digits).
var ownedName = regexp.MustCompile(`^(.+)\.tmp-[0-9a-f]{12}$`)

const lockSuffix = ".lock"

// Owned is a working directory held by this process.
type Owned struct {
	// Path is the directory, BASE.tmp-HEX.
	Path string
	lock *os.File
}

// CreateOwned creates a new, empty working directory base.tmp-HEX in
// base's directory, held by this process until Release.
func CreateOwned(base string) (*Owned, error) {
	for range 8 {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		path := base + ".tmp-" + hex.EncodeToString(b[:])
		lock, err := os.OpenFile(path+lockSuffix, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// A cleaner that opened the new lock file before the flock below
		// may have taken it and removed the file: then try another name.
		if !lockHeld(lock, path+lockSuffix) {
			_ = lock.Close()
			continue
		}
		if err := os.Mkdir(path, 0o755); err != nil {
			_ = os.Remove(path + lockSuffix)
			_ = lock.Close()
			return nil, err
		}
		return &Owned{Path: path, lock: lock}, nil
	}
	return nil, fmt.Errorf("create a working directory next to %s: no free name after 8 tries", base)
}

// lockHeld takes f's flock without waiting and checks that path still
// names f (not a file removed meanwhile).
func lockHeld(f *os.File, path string) bool {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return false
		}
		break
	}
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// Release gives the directory up: it removes the lock file and drops the
// flock. Call it once the directory is gone (renamed into place, or
// removed).
func (o *Owned) Release() error {
	if o == nil || o.lock == nil {
		return nil
	}
	err := os.Remove(o.lock.Name())
	if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	if cerr := o.lock.Close(); err == nil {
		err = cerr
	}
	o.lock = nil
	return err
}

// RemoveAll removes the directory and releases it.
func (o *Owned) RemoveAll() error {
	if o == nil || o.lock == nil {
		return nil
	}
	return errors.Join(os.RemoveAll(o.Path), o.Release())
}

// CleanDead removes the working directories BASE.tmp-HEX (with their lock
// files) of the given base whose owner is dead. It returns what it
// removed. A directory without a lock file (made by an older version) is
// left alone.
func CleanDead(base string) ([]string, error) {
	return clean(filepath.Dir(base), func(b string) bool { return b == filepath.Base(base) })
}

// CleanDeadIn removes every working directory in dir whose owner is dead,
// whatever its base.
func CleanDeadIn(dir string) ([]string, error) {
	return clean(dir, func(string) bool { return true })
}

func clean(dir string, want func(base string) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), lockSuffix)
		if !ok || e.IsDir() {
			continue
		}
		m := ownedName.FindStringSubmatch(name)
		if m == nil || !want(m[1]) {
			continue
		}
		path := filepath.Join(dir, name)
		gone, err := removeIfDead(path)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// removeIfDead removes path and its lock file if nobody holds the lock.
func removeIfDead(path string) (bool, error) {
	lock, err := os.OpenFile(path+lockSuffix, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // its owner released it meanwhile
	}
	if err != nil {
		return false, err
	}
	defer lock.Close()
	if !lockHeld(lock, path+lockSuffix) {
		return false, nil // alive, or released meanwhile
	}
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("remove a dead run's %s: %w", path, err)
	}
	if err := os.Remove(path + lockSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return true, fmt.Errorf("remove a dead run's %s: %w", path+lockSuffix, err)
	}
	return true, nil
}
