package supervisor

import "syscall"

// workerSysProcAttr makes the worker die with the parent.
func workerSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
