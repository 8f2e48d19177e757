//go:build !linux

package supervisor

import "syscall"

// workerSysProcAttr: without Pdeathsig, a worker outlives a parent killed
// with SIGKILL; AttachWorker only catches a parent that died before the
// worker started.
func workerSysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
