package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff is a growing wait: Initial first, then twice the previous wait
// up to Max (an Initial above Max stays as set). Jitter, from 0 to 1, is
// the part of each wait drawn at random below it, so that many callers
// that failed together do not retry together. The zero Backoff waits 0.
// A Backoff is one caller's: it is not safe for concurrent use.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64

	next time.Duration
}

// Next returns the wait before the next try and grows the one after it.
func (b *Backoff) Next() time.Duration {
	d := b.next
	if d <= 0 {
		d = b.Initial
	}
	b.next = max(d, min(2*d, b.Max))
	if b.Jitter > 0 && d > 0 {
		d -= time.Duration(rand.Float64() * min(b.Jitter, 1) * float64(d))
	}
	return d
}

// Reset starts the Backoff again from Initial (after a success).
func (b *Backoff) Reset() { b.next = 0 }

// Sleep waits d, or until ctx ends: nil after d, ctx's error when ctx
// ended first (also when it had ended already, even with d <= 0).
func Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
