package scheduler

import "time"

// Clock is the Runner's time: due times of queue entries, timers and
// retries are on it. Tests pass a fake one (storetest.FakeClock).
type Clock interface {
	Now() time.Time
	// After delivers once d has passed on this clock.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// After implements Clock.
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
