package supervisor

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// IsWorker reports whether this process is a worker started by the parent.
func IsWorker() bool { return os.Getenv(EnvWorker) == "1" }

// Entrypoint is what the previous worker asked for with RequestRebootstrap
// ("" on a first start, and in a process that is not a worker). The parent
// passes the last requested entrypoint again when it restarts a crashed
// worker.
func Entrypoint() string {
	if !IsWorker() {
		return ""
	}
	return os.Getenv(EnvEntrypoint)
}

// AttachWorker is the worker's first call. It returns ErrParentGone if the
// parent died before the worker's death signal was armed (the worker must
// exit then), and marks the request pipe close-on-exec so that processes
// the worker starts do not inherit it.
func AttachWorker() error {
	if !IsWorker() {
		return ErrNotWorker
	}
	want, err := strconv.Atoi(os.Getenv(EnvParentPID))
	if err != nil {
		return fmt.Errorf("%w: %s=%q is not a pid", ErrNotWorker, EnvParentPID, os.Getenv(EnvParentPID))
	}
	if got := os.Getppid(); got != want {
		return fmt.Errorf("%w (parent pid %d, started by %d)", ErrParentGone, got, want)
	}
	if err := checkRequestPipe(); err != nil {
		return err
	}
	syscall.CloseOnExec(requestFD)
	return nil
}

// RequestRebootstrap asks the parent to wipe the data dir and start a new
// worker at entrypoint. The caller exits with ExitRebootstrap right after:
// the parent acts when both the request and that exit code arrived.
func RequestRebootstrap(entrypoint string) error {
	if !IsWorker() {
		return ErrNotWorker
	}
	msg, err := encodeRebootstrap(entrypoint)
	if err != nil {
		return err
	}
	if err := checkRequestPipe(); err != nil {
		return err
	}
	// One write of less than PIPE_BUF bytes is atomic. The descriptor is
	// written with a raw syscall and never wrapped in an *os.File, whose
	// finalizer would close it.
	for len(msg) > 0 {
		n, err := syscall.Write(requestFD, msg)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("supervisor: send rebootstrap request: %w", err)
		}
		msg = msg[n:]
	}
	return nil
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
