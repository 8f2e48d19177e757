package supervisor

import (
	"fmt"
	"os"
	"strconv"
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
	closeRequestPipeOnExec()
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
	if err := writeRequest(msg); err != nil {
		return fmt.Errorf("supervisor: send rebootstrap request: %w", err)
	}
	return nil
}
