package replicaset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The copy's gate lets its entries through as fast as their own queue
// allows on an idle log, spaces them out behind a queue the copy did not
// make, and learns a steady queue as the new base.
func TestTheCopyGateOpensOnAnIdleLogAndYieldsToAQueue(t *testing.T) {
	clock := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	g := newCopyGate(func() time.Time { return clock })
	ctx := context.Background()
	entry := func(delay time.Duration) {
		t.Helper()
		if g.nextAt.After(clock) {
			clock = g.nextAt
		}
		if err := g.acquire(ctx); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(delay)
		g.release(delay, true)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()

	// At most the window's entries in flight: a third waits for one of
	// two to leave.
	for range 2 {
		if err := g.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.acquire(canceled); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "2 entries in flight") {
		t.Fatalf("a third entry with two in flight: %v", err)
	}
	g.release(0, false)
	g.release(0, false)

	// An idle log: every entry takes the base delay.
	const base = 2 * time.Millisecond
	for range 200 {
		entry(base)
	}
	if g.window != copyGateMaxWindow {
		t.Fatalf("window %.2f on an idle log, want %d", g.window, copyGateMaxWindow)
	}
	// A queue of twice the target: the window closes to its least, and
	// the next entry waits for the log to be free again.
	for range 200 {
		entry(base + 2*copyGateTarget)
	}
	if g.window != copyGateMinWindow || !g.nextAt.After(clock) {
		t.Fatalf("window %.3f, next entry at %v (now %v), behind a queue", g.window, g.nextAt, clock)
	}
	if err := g.acquire(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("an entry before its turn: %v", err)
	}
	// Half the target: the window opens again.
	for range 400 {
		entry(base + copyGateTarget/2)
	}
	if g.window != copyGateMaxWindow {
		t.Fatalf("window %.2f with half the target's queue, want %d", g.window, copyGateMaxWindow)
	}
	// A steady queue two base windows long becomes the base.
	for g.window > 1 {
		entry(base + 2*copyGateTarget)
	}
	for range 2 {
		clock = clock.Add(copyGateBaseWindow)
		entry(base + 2*copyGateTarget)
	}
	for range 400 {
		entry(base + 2*copyGateTarget)
	}
	if g.window != copyGateMaxWindow {
		t.Fatalf("window %.2f once a steady queue is the base, want %d", g.window, copyGateMaxWindow)
	}
}
