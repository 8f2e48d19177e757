package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shardkit/shardkit/numerator/internal/fsutil"
)

// LocalStore keeps the document in a directory: "record.json", replaced by
// writing a temporary file, fsync and rename (then fsync of the directory),
// under an exclusive flock on "lock". Processes sharing the directory (one
// machine, or a shared file system with working flock) are serialized.
type LocalStore struct {
	dir string
}

const (
	localRecord = "record.json"
	localLock   = "lock"
)

// NewLocalStore uses dir, creating it if needed.
func NewLocalStore(dir string) (*LocalStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: the local coordinator needs a directory (--coordinator-addr)", ErrInvalid)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return &LocalStore{dir: dir}, nil
}

// NewLocal returns the local coordinator on dir with the given clock.
func NewLocal(dir string, now func() time.Time) (*DocCoordinator, error) {
	s, err := NewLocalStore(dir)
	if err != nil {
		return nil, err
	}
	return NewDocCoordinator(s, now), nil
}

func (s *LocalStore) lock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, localLock), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// Poll a non-blocking flock so that ctx can end the wait; holders keep
	// it for one small read-modify-write.
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("%w: flock %s: %w", ErrUnavailable, f.Name(), err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, context.Cause(ctx)
		case <-t.C:
		}
	}
}

func (s *LocalStore) read() (Document, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, localRecord))
	if errors.Is(err, os.ErrNotExist) {
		return Document{Format: documentFormat}, nil
	}
	if err != nil {
		return Document{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	d, err := DecodeDocument(b)
	if err != nil {
		return d, fmt.Errorf("%s: %w", filepath.Join(s.dir, localRecord), err)
	}
	return d, nil
}

func (s *LocalStore) Read(ctx context.Context) (Document, error) {
	f, err := s.lock(ctx)
	if err != nil {
		return Document{}, err
	}
	defer f.Close()
	return s.read()
}

func (s *LocalStore) Update(ctx context.Context, fn func(*Document) error) error {
	f, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer f.Close() // closing releases the flock
	d, err := s.read()
	if err != nil {
		return err
	}
	if err := fn(&d); err != nil {
		return err
	}
	return s.write(d.Encode())
}

func (s *LocalStore) write(b []byte) error {
	tmp, err := os.CreateTemp(s.dir, localRecord+".tmp-*")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(s.dir, localRecord))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("%w: write %s: %w", ErrUnavailable, localRecord, err)
	}
	if err := fsutil.SyncDir(s.dir); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

func (s *LocalStore) Close() error { return nil }
