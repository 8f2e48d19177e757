// Package coordtest is the conformance suite of numerator coordinators:
// every backend (local, zookeeper, shardkit) must pass Run.
//
// It owns only tests; it must never be imported by non-test code.
package coordtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/numerator/coordinator"
)

// Harness builds coordinators for the suite.
type Harness struct {
	// New returns a coordinator on one shared record, as one master would
	// open it: every call within a subtest sees the same lock and state.
	// The subtest's name keys the record, so subtests do not share one.
	New func(t *testing.T, record string) coordinator.Coordinator
	// Advance makes d pass on the coordinators' clock. Backends with a
	// fake clock move it; backends judged by a real clock wait.
	Advance func(t *testing.T, d time.Duration)
	// Timeout is the lock timeout the suite uses; Advance(Timeout+...) must
	// expire a lock. Fake-clock backends can use a minute.
	Timeout time.Duration
}

// Run runs every conformance test against h.
func Run(t *testing.T, h Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness, rec string)
	}{
		{"AcquireFreeLock", testAcquireFree},
		{"SecondMasterRefused", testSecondRefused},
		{"ReportRecordsStateAndReleases", testReportRecords},
		{"FailedReportKeepsState", testFailedReport},
		{"TimedOutHolderDroppedAndReportRefused", testTimedOutDropped},
		{"TimedOutHolderRefusedWhenNobodyTookTheLock", testTimedOutAlone},
		{"RenewKeepsTheLock", testRenew},
		{"UnknownTicketRefused", testUnknownTicket},
		{"StateOnlyMovesForward", testForward},
		{"RacingMastersTakeTurns", testRacing},
		{"InvalidRequests", testInvalid},
		{"RunMasterWaitsRecordsAndReleases", testRunMaster},
		{"ForceUnlockFencesTheHolder", testForceUnlock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, h, t.Name())
		})
	}
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func open(t *testing.T, h Harness, rec string) coordinator.Coordinator {
	t.Helper()
	c := h.New(t, rec)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func mustAcquire(t *testing.T, c coordinator.Coordinator, holder string, timeout time.Duration) coordinator.Lease {
	t.Helper()
	l, err := c.Acquire(ctx(t), holder, timeout)
	if err != nil {
		t.Fatalf("Acquire(%s): %v", holder, err)
	}
	if l.Holder != holder || l.Ticket == 0 || !l.Expires.After(l.Acquired) {
		t.Fatalf("Acquire(%s) = %+v", holder, l)
	}
	return l
}

func testAcquireFree(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	l := mustAcquire(t, c, "dc-a", h.Timeout)
	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Lock == nil || st.Lock.Holder != "dc-a" || st.Lock.Ticket != l.Ticket || st.LastTicket != l.Ticket {
		t.Fatalf("status %+v after granting %+v", st, l)
	}
	if l.State.Location != "" {
		t.Fatalf("a fresh record has state %+v", l.State)
	}
}

func testSecondRefused(t *testing.T, h Harness, rec string) {
	t.Helper()
	a, b := open(t, h, rec), open(t, h, rec)
	mustAcquire(t, a, "dc-a", h.Timeout)
	_, err := b.Acquire(ctx(t), "dc-b", h.Timeout)
	if !errors.Is(err, coordinator.ErrLocked) {
		t.Fatalf("second Acquire = %v, want ErrLocked", err)
	}
}

func testReportRecords(t *testing.T, h Harness, rec string) {
	t.Helper()
	a, b := open(t, h, rec), open(t, h, rec)
	l := mustAcquire(t, a, "dc-a", h.Timeout)
	st, err := a.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: "/states/1", Version: "1.0.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Location != "/states/1" || st.Master != "dc-a" || st.Ticket != l.Ticket || st.Version != "1.0.0.0" {
		t.Fatalf("recorded state %+v", st)
	}
	l2 := mustAcquire(t, b, "dc-b", h.Timeout)
	if l2.Ticket <= l.Ticket || l2.State.Location != "/states/1" {
		t.Fatalf("next lease %+v after ticket %d: want a larger ticket and the recorded state", l2, l.Ticket)
	}
	// A report is accepted once: the lock is gone after it.
	if _, err := a.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: "/states/x"}); !errors.Is(err, coordinator.ErrStale) {
		t.Fatalf("second report of ticket %d = %v, want ErrStale", l.Ticket, err)
	}
}

func testFailedReport(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	l := mustAcquire(t, c, "dc-a", h.Timeout)
	if _, err := c.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: "/states/1"}); err != nil {
		t.Fatal(err)
	}
	l2 := mustAcquire(t, c, "dc-b", h.Timeout)
	st, err := c.Report(ctx(t), l2.Ticket, coordinator.Report{OK: false})
	if err != nil {
		t.Fatal(err)
	}
	if st.Location != "/states/1" || st.Ticket != l.Ticket {
		t.Fatalf("a failed run changed the state to %+v", st)
	}
	mustAcquire(t, c, "dc-c", h.Timeout) // released
}

func testTimedOutDropped(t *testing.T, h Harness, rec string) {
	t.Helper()
	a, b := open(t, h, rec), open(t, h, rec)
	la := mustAcquire(t, a, "dc-a", h.Timeout)
	h.Advance(t, h.Timeout+h.Timeout/2)
	lb := mustAcquire(t, b, "dc-b", h.Timeout) // dc-a is dropped
	if lb.Ticket <= la.Ticket {
		t.Fatalf("ticket %d after %d", lb.Ticket, la.Ticket)
	}
	if _, err := a.Report(ctx(t), la.Ticket, coordinator.Report{OK: true, Location: "/states/late"}); !errors.Is(err, coordinator.ErrStale) {
		t.Fatalf("late report = %v, want ErrStale", err)
	}
	if _, err := a.Renew(ctx(t), la.Ticket, h.Timeout); !errors.Is(err, coordinator.ErrStale) {
		t.Fatalf("late renew = %v, want ErrStale", err)
	}
	st, err := b.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Location == "/states/late" || st.Lock == nil || st.Lock.Ticket != lb.Ticket {
		t.Fatalf("status %+v after a refused late report", st)
	}
}

func testTimedOutAlone(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	l := mustAcquire(t, c, "dc-a", h.Timeout)
	h.Advance(t, h.Timeout+h.Timeout/2)
	if _, err := c.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: "/states/late"}); !errors.Is(err, coordinator.ErrStale) {
		t.Fatalf("report after the timeout = %v, want ErrStale", err)
	}
	st, err := c.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Location != "" {
		t.Fatalf("state %+v recorded from a timed-out holder", st.State)
	}
}

func testRenew(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	l := mustAcquire(t, c, "dc-a", h.Timeout)
	h.Advance(t, h.Timeout*2/3)
	l2, err := c.Renew(ctx(t), l.Ticket, h.Timeout)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Ticket != l.Ticket || !l2.Expires.After(l.Expires) {
		t.Fatalf("renewed %+v from %+v", l2, l)
	}
	h.Advance(t, h.Timeout*2/3) // past the first expiry, within the renewed one
	if _, err := c.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: "/states/1"}); err != nil {
		t.Fatalf("report within the renewed lock: %v", err)
	}
}

func testUnknownTicket(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	l := mustAcquire(t, c, "dc-a", h.Timeout)
	for _, tk := range []uint64{0, l.Ticket + 1, l.Ticket + 100} {
		if _, err := c.Report(ctx(t), tk, coordinator.Report{OK: true, Location: "/x"}); !errors.Is(err, coordinator.ErrStale) {
			t.Errorf("report with ticket %d = %v, want ErrStale", tk, err)
		}
	}
}

func testForward(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	var last, prev uint64
	for i := range 5 {
		l := mustAcquire(t, c, fmt.Sprintf("dc-%d", i%2), h.Timeout)
		if prev != 0 {
			// The previous holder's ticket, while a newer holder has the
			// lock: refused, and the lock stays with the new holder.
			if _, err := c.Report(ctx(t), prev, coordinator.Report{OK: true, Location: "/states/old"}); !errors.Is(err, coordinator.ErrStale) {
				t.Fatalf("report with the previous ticket %d while %d holds the lock = %v, want ErrStale", prev, l.Ticket, err)
			}
		}
		st, err := c.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: fmt.Sprintf("/states/%d", i)})
		if err != nil {
			t.Fatalf("report of the current holder after a stale one: %v", err)
		}
		if st.Ticket <= last || st.Location != fmt.Sprintf("/states/%d", i) {
			t.Fatalf("state went from ticket %d to %+v", last, st)
		}
		last, prev = st.Ticket, l.Ticket
	}
}

func testRacing(t *testing.T, h Harness, rec string) {
	t.Helper()
	const masters, rounds = 4, 3
	var inside atomic.Int32
	var mu sync.Mutex
	tickets := map[uint64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, masters*rounds)
	for m := range masters {
		c := open(t, h, rec)
		name := fmt.Sprintf("dc-%d", m)
		wg.Go(func() {
			for r := range rounds {
				l, err := coordinator.AcquireWait(ctx(t), c, name, time.Hour, time.Millisecond)
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d masters hold the lock at once", n)
				}
				mu.Lock()
				if other, ok := tickets[l.Ticket]; ok {
					errs <- fmt.Errorf("ticket %d granted to %s and %s", l.Ticket, other, name)
				}
				tickets[l.Ticket] = name
				mu.Unlock()
				// Hold the lock a while, so that a second grant meanwhile
				// is seen (no timing assumption: a correct backend never
				// grants it, however long this takes).
				time.Sleep(10 * time.Millisecond)
				inside.Add(-1)
				if _, err := c.Report(ctx(t), l.Ticket, coordinator.Report{OK: true, Location: fmt.Sprintf("/%s/%d", name, r)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(tickets) != masters*rounds {
		t.Fatalf("%d grants, want %d", len(tickets), masters*rounds)
	}
}

func testInvalid(t *testing.T, h Harness, rec string) {
	t.Helper()
	c := open(t, h, rec)
	if _, err := c.Acquire(ctx(t), "", h.Timeout); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("Acquire without a holder = %v, want ErrInvalid", err)
	}
	if _, err := c.Acquire(ctx(t), "dc-a", 0); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("Acquire with timeout 0 = %v, want ErrInvalid", err)
	}
	l := mustAcquire(t, c, "dc-a", h.Timeout)
	if _, err := c.Report(ctx(t), l.Ticket, coordinator.Report{OK: true}); !errors.Is(err, coordinator.ErrInvalid) {
		t.Errorf("successful report without a location = %v, want ErrInvalid", err)
	}
}

// testRunMaster: a turn waits while another master holds the lock (and
// is told who), starts from the state that master recorded, records its
// own and releases the lock; a failed turn keeps the state and releases.
func testRunMaster(t *testing.T, h Harness, rec string) {
	t.Helper()
	a, b := open(t, h, rec), open(t, h, rec)
	held := mustAcquire(t, a, "dc-a", h.Timeout)
	var waits int
	var waitErr error
	opts := coordinator.MasterOptions{Holder: "dc-b", TTL: h.Timeout, Retry: time.Millisecond,
		Waiting: func(w coordinator.Waiting) {
			waits++
			if waits > 1 {
				return
			}
			if w.Lock == nil || w.Lock.Holder != "dc-a" || w.Lock.Ticket != held.Ticket {
				waitErr = fmt.Errorf("waiting on %+v, want dc-a's ticket %d", w.Lock, held.Ticket)
			}
			if _, err := a.Report(ctx(t), held.Ticket, coordinator.Report{OK: true, Location: "/states/a"}); err != nil {
				waitErr = errors.Join(waitErr, err)
			}
		}}
	st, err := coordinator.RunMaster(ctx(t), b, opts, func(_ context.Context, l coordinator.Lease) (coordinator.Report, error) {
		if l.State.Location != "/states/a" {
			return coordinator.Report{}, fmt.Errorf("the turn starts from %+v, want /states/a", l.State)
		}
		return coordinator.Report{Location: "/states/b", Version: "1.0.0.1"}, nil
	})
	if err != nil || waitErr != nil {
		t.Fatalf("RunMaster while dc-a holds the lock: %v; waiting: %v", err, waitErr)
	}
	if waits == 0 || st.Location != "/states/b" || st.Master != "dc-b" || st.Ticket <= held.Ticket {
		t.Fatalf("after %d waits recorded %+v", waits, st)
	}
	boom := errors.New("injected run failure")
	opts.Waiting = nil
	if _, err := coordinator.RunMaster(ctx(t), a, opts, func(context.Context, coordinator.Lease) (coordinator.Report, error) {
		return coordinator.Report{Location: "/states/half"}, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failed turn = %v, want the run's error", err)
	}
	s, err := b.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.State.Location != "/states/b" || s.State.Ticket != st.Ticket || s.Lock != nil {
		t.Fatalf("status after a failed turn %+v: want /states/b kept and the lock free", s)
	}
}

// testForceUnlock: an operator drops a live holder's lock; the holder's
// renewal and report are refused, the state stays, the next grant has a
// larger ticket; dropping a free lock drops nothing.
func testForceUnlock(t *testing.T, h Harness, rec string) {
	t.Helper()
	a, op := open(t, h, rec), open(t, h, rec)
	if l, err := op.ForceUnlock(ctx(t)); err != nil || l != nil {
		t.Fatalf("ForceUnlock of a fresh record = %+v, %v; want nothing dropped", l, err)
	}
	first := mustAcquire(t, a, "dc-a", h.Timeout)
	if _, err := a.Report(ctx(t), first.Ticket, coordinator.Report{OK: true, Location: "/states/1"}); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, a, "dc-a", h.Timeout)
	dropped, err := op.ForceUnlock(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if dropped == nil || dropped.Holder != "dc-a" || dropped.Ticket != held.Ticket {
		t.Fatalf("ForceUnlock dropped %+v, want dc-a's ticket %d", dropped, held.Ticket)
	}
	if _, err := a.Renew(ctx(t), held.Ticket, h.Timeout); !errors.Is(err, coordinator.ErrStale) {
		t.Fatalf("renewal after the lock was dropped = %v, want ErrStale", err)
	}
	if _, err := a.Report(ctx(t), held.Ticket, coordinator.Report{OK: true, Location: "/states/late"}); !errors.Is(err, coordinator.ErrStale) {
		t.Fatalf("report after the lock was dropped = %v, want ErrStale", err)
	}
	st, err := op.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Lock != nil || st.State.Location != "/states/1" {
		t.Fatalf("status after ForceUnlock %+v: want the lock free and /states/1 kept", st)
	}
	next := mustAcquire(t, op, "dc-b", h.Timeout)
	if next.Ticket <= held.Ticket || next.State.Location != "/states/1" {
		t.Fatalf("the next grant %+v after dropping ticket %d", next, held.Ticket)
	}
	if l, err := op.ForceUnlock(ctx(t)); err != nil || l == nil || l.Ticket != next.Ticket {
		t.Fatalf("ForceUnlock of dc-b's lock = %+v, %v", l, err)
	}
	if l, err := op.ForceUnlock(ctx(t)); err != nil || l != nil {
		t.Fatalf("ForceUnlock of a free lock = %+v, %v; want nothing dropped", l, err)
	}
}
