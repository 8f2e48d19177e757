package supervisor

import "time"

// nextBackoff is the delay before the next restart after a crash, given the
// previous delay (0 after a reset): initial, then doubling up to max.
func nextBackoff(prev, initial, maxDelay time.Duration) time.Duration {
	if prev <= 0 {
		return min(initial, maxDelay)
	}
	if prev >= maxDelay/2 {
		return maxDelay
	}
	return min(prev*2, maxDelay)
}
