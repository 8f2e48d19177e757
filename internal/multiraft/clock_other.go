//go:build !linux

package multiraft

import "time"

// leaseClock is Go's monotonic clock where CLOCK_BOOTTIME is not at hand
// (it may stop while the machine is suspended: see Config.LeaseReads).
func leaseClock() time.Duration { return time.Since(clockStart) }

var clockStart = time.Now()
