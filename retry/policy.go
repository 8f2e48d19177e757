package retry

import (
	"context"
	"time"
)

// Verdict is what one attempt's answer asks of a Policy.
type Verdict int

const (
	// Stop: the answer is final (served, or refused in a way that a retry
	// cannot change, or the caller decided so).
	Stop Verdict = iota
	// Follow: a redirect named where to go; the next attempt goes at once.
	// It counts as an attempt.
	Follow
	// Again: try again after Policy.Backoff's next wait. It counts as an
	// attempt.
	Again
	// Switch: the bucket is in its move's switch; try again after
	// Policy.Switch's next wait without spending an attempt, for up to
	// Policy.SwitchFor from the first Switch. After that it counts as an
	// attempt (and still waits Policy.Switch).
	Switch
)

// Outcome is how Policy.Run ended.
type Outcome int

const (
	// Stopped: an attempt said Stop; its error is the answer.
	Stopped Outcome = iota
	// Exhausted: Attempts attempts were spent without a final answer;
	// the error is the last attempt's.
	Exhausted
	// Ended: the caller's context ended during a wait; the error is the
	// last attempt's (the caller decides how to say that the deadline
	// came).
	Ended
)

// Policy is the one redirect-following retry loop: the caller's attempt
// says what its answer asks (Verdict), the Policy waits and counts.
// Attempts bounds the counted attempts, the caller's context every wait.
type Policy struct {
	// Attempts bounds the counted attempts (at least one is made).
	Attempts int
	// Backoff is the wait before an attempt that follows Again.
	Backoff Backoff
	// Switch is the wait before an attempt that follows Switch, and
	// SwitchFor how long from the first Switch those attempts are not
	// counted (0: they always count). A wait is cut to what SwitchFor
	// has left while any is left.
	Switch    Backoff
	SwitchFor time.Duration
	// Wait waits d between attempts (nil: Sleep). A caller that can learn
	// sooner that the next attempt is worth making (the router, from group
	// 0's changes) returns early; it returns ctx's error when ctx ends.
	Wait func(ctx context.Context, d time.Duration) error
}

// Run calls attempt, with the number of counted attempts made before it,
// until it says Stop, Attempts counted attempts are spent, or ctx ends
// during a wait; it returns how it ended and the last attempt's error.
func (p *Policy) Run(ctx context.Context, attempt func(n int) (Verdict, error)) (Outcome, error) {
	wait := p.Wait
	if wait == nil {
		wait = Sleep
	}
	var switchEnd time.Time
	for n := 0; ; {
		v, err := attempt(n)
		var d time.Duration
		switch v {
		case Stop:
			return Stopped, err
		case Follow:
			n++
		case Again:
			n++
			d = p.Backoff.Next()
		case Switch:
			d = p.Switch.Next()
			now := time.Now()
			if switchEnd.IsZero() {
				switchEnd = now.Add(p.SwitchFor)
			}
			if left := switchEnd.Sub(now); left > 0 {
				d = min(d, left)
			} else {
				n++
			}
		}
		if n >= max(p.Attempts, 1) {
			return Exhausted, err
		}
		if d > 0 && wait(ctx, d) != nil || ctx.Err() != nil {
			return Ended, err
		}
	}
}
