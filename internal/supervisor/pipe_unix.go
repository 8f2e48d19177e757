//go:build unix

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// inode identifies the request pipe, so that the worker can check that
// fd 3 is still it.
func inode(f *os.File) (uint64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("supervisor: request pipe: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("supervisor: request pipe: no inode")
	}
	return uint64(st.Ino), nil //nolint:unconvert // Ino is not uint64 on every platform
}

// checkRequestPipe makes sure fd 3 is still the pipe the parent gave us
// (the same inode), so that nothing is ever written to a descriptor
// number that was reused for something else.
func checkRequestPipe() error {
	want, err := strconv.ParseUint(os.Getenv(EnvPipe), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s=%q is not an inode number", ErrNotWorker, EnvPipe, os.Getenv(EnvPipe))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(requestFD, &st); err != nil {
		return fmt.Errorf("supervisor: request pipe (fd %d): %w", requestFD, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFIFO || uint64(st.Ino) != want { //nolint:unconvert // Ino is not uint64 on every platform
		return fmt.Errorf("supervisor: fd %d is not the parent's request pipe (inode %d, want %d)", requestFD, st.Ino, want)
	}
	return nil
}

func closeRequestPipeOnExec() { syscall.CloseOnExec(requestFD) }

// writeRequest writes msg to fd 3. One write of less than PIPE_BUF bytes
// is atomic. The descriptor is written with a raw syscall and never
// wrapped in an *os.File, whose finalizer would close it.
func writeRequest(msg []byte) error {
	for len(msg) > 0 {
		n, err := syscall.Write(requestFD, msg)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		msg = msg[n:]
	}
	return nil
}
