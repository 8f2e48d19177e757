package replicaset

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// copyGate paces the copy into this replicaset by itself, from the delay
// its own entries see in the replicaset's log: a copy is elastic work,
// which the clients' writes come before. It is LEDBAT's rule (RFC 6817,
// the transport of background bulk transfers) on log entries instead of
// packets: the delay of a copy entry, from its proposal to its apply, is
// the base delay (the least seen in the last two windows of
// copyGateBaseWindow) plus the queue it waited in (only full entries are
// measured: an entry's own work grows with its size, and a small one
// would make the base too small for the full ones); the number of copy
// entries in flight, all of this replicaset's receives together, grows
// while that queue stays below copyGateTarget and shrinks above it, below
// one entry at a time by spacing the entries out. The clients' writes
// wait in the same queue (the same log, the same apply loop, the same
// cores), so the copy adds at most about copyGateTarget to their delay:
// on an idle replicaset its entries go as fast as their own queue
// allows, under load slower, with no setting. The quotas, CopyPipeline
// (per receive) and the copy rate stay upper bounds.
type copyGate struct {
	now func() time.Time

	mu       sync.Mutex
	wake     chan struct{} // closed when an entry leaves or the window grows
	inflight int
	window   float64   // entries in flight allowed; below 1, spaced out
	nextAt   time.Time // below one entry at a time: when the next may go
	// The least delay in the current window of copyGateBaseWindow and
	// in the one before it (0: none seen).
	baseCur, basePrev time.Duration
	baseSince         time.Time
}

const (
	// copyGateTarget is the queue a copy may add to the log's delay.
	copyGateTarget = 10 * time.Millisecond
	// copyGateBaseWindow is how long a least delay counts as the base
	// (two windows: a base that rose with a steady load is forgotten
	// within 2 windows, and the load's own queue is in it then).
	copyGateBaseWindow = 10 * time.Second
	// The window's bounds: at most copyGateMaxWindow entries in flight,
	// at least one entry per 1/copyGateMinWindow of its delay.
	copyGateMaxWindow = 16
	copyGateMinWindow = 1.0 / 8
)

func newCopyGate(now func() time.Time) *copyGate {
	return &copyGate{now: now, wake: make(chan struct{}), window: 2}
}

// acquire returns when one more copy entry may be proposed, or with ctx's
// error; the entry's delay is then given to release.
func (g *copyGate) acquire(ctx context.Context) error {
	for {
		g.mu.Lock()
		wait := g.nextAt.Sub(g.now())
		if g.inflight < max(1, int(g.window)) && wait <= 0 {
			g.inflight++
			g.mu.Unlock()
			return nil
		}
		wake := g.wake
		g.mu.Unlock()
		var timer *time.Timer
		var due <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			due = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return fmt.Errorf("waiting for the copy's turn in the log (%d entries in flight): %w", g.flight(), ctx.Err())
		case <-wake:
		case <-due:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (g *copyGate) flight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// release ends an entry that took delay from its proposal to its apply
// (ok false: it failed or was not a full entry, and says nothing of the
// queue).
func (g *copyGate) release(delay time.Duration, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	if ok {
		base := g.base(delay)
		queue := delay - base
		// LEDBAT: cwnd += GAIN * off_target / cwnd per acknowledged
		// packet, off_target in [-1, 1].
		off := float64(copyGateTarget-queue) / float64(copyGateTarget)
		off = min(1, max(-1, off))
		g.window = min(copyGateMaxWindow, max(copyGateMinWindow, g.window+off/max(1, g.window)))
		if g.window < 1 {
			// One entry every delay/window: the log is busy with the
			// entry's delay, then free for the rest.
			g.nextAt = g.now().Add(time.Duration(float64(delay) * (1/g.window - 1)))
		} else {
			g.nextAt = time.Time{}
		}
	}
	// The waiters look again.
	close(g.wake)
	g.wake = make(chan struct{})
}

// base takes delay into the least delays and returns the base delay.
func (g *copyGate) base(delay time.Duration) time.Duration {
	now := g.now()
	if now.Sub(g.baseSince) >= copyGateBaseWindow {
		g.basePrev, g.baseCur, g.baseSince = g.baseCur, 0, now
	}
	if g.baseCur == 0 || delay < g.baseCur {
		g.baseCur = delay
	}
	if g.basePrev != 0 && g.basePrev < g.baseCur {
		return g.basePrev
	}
	return g.baseCur
}
