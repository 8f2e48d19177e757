//go:build unix

package replicaset

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this process has used so
// far: a benchmark's cost on a machine shared with other load, where the
// wall time per op varies with what the others do.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
