package multiraft

import (
	"time"

	"golang.org/x/sys/unix"
)

// leaseClock reads CLOCK_BOOTTIME: monotonic, and unlike Go's monotonic
// clock (CLOCK_MONOTONIC) it goes on counting while the machine is
// suspended, so a leader that slept through its lease sees it gone.
func leaseClock() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Since(clockStart) // never on Linux ≥ 2.6.39
	}
	return time.Duration(ts.Nano())
}

var clockStart = time.Now()
