package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
)

// ErrLocked: the database is open in another process (or already in this
// one): its directory lock is held.
var ErrLocked = errors.New("storage: the database is in use: its lock is held")

// ErrDamaged: a file the database needs is missing, so it cannot be
// opened as it is. (Corrupt data is reported as Pebble's corruption errors
// or a *CorruptionError; IsDamaged recognizes all of them.)
var ErrDamaged = errors.New("storage: the database is damaged")

// CorruptionError is corruption Pebble found in one of its files, for
// example a block whose checksum does not match. Pebble finds it where
// nobody asked (a compaction) as well as on a read; Options.OnCorruption
// receives it either way.
type CorruptionError struct {
	Path string // the corrupt file
	Err  error  // Pebble's account, marked as corruption
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("file %s is corrupt: %s", e.Path, oneLine(e.Err.Error()))
}

func (e *CorruptionError) Unwrap() error { return e.Err }

// IsDamaged reports whether err says that the database's files are
// corrupt or missing: an instance cannot go on with them, and restarting
// it finds the same damage.
func IsDamaged(err error) bool {
	if err == nil {
		return false
	}
	var ce *CorruptionError
	// pebble.IsCorruptionError, not errors.Is: Pebble marks corruption with
	// cockroachdb/errors, which the standard errors.Is does not see.
	return errors.Is(err, ErrDamaged) || errors.As(err, &ce) || pebble.IsCorruptionError(err)
}

// DescribeDamage says in one line what err found damaged: the corrupt
// file and Pebble's account of it when Pebble named one, else the error's
// first line.
func DescribeDamage(err error) string {
	var ce *CorruptionError
	if errors.As(err, &ce) {
		return ce.Error()
	}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		return (&CorruptionError{Path: info.Path, Err: info.Details}).Error()
	}
	return oneLine(err.Error())
}

// openError classifies a failure of pebble.Open.
func openError(dir string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) && !errors.As(err, &pe) ||
		strings.Contains(err.Error(), "lock held by current process"):
		return fmt.Errorf("%w (%s): %w", ErrLocked, lockFile(dir), err)
	case pebble.IsCorruptionError(err):
		return fmt.Errorf("%w: %s", ErrDamaged, DescribeDamage(err))
	case errors.Is(err, fs.ErrNotExist) && errors.As(err, &pe):
		return fmt.Errorf("%w: file %s is missing (%s)", ErrDamaged, pe.Path, oneLine(err.Error()))
	}
	return fmt.Errorf("storage: open pebble in %s: %w", dir, err)
}

func lockFile(dir string) string { return strings.TrimSuffix(dir, "/") + "/LOCK" }

// oneLine keeps the first line of a message (Pebble's errors may carry
// details on further lines).
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return strings.TrimSpace(s)
}
