package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardkit/shardkit/numerator/coordinator"
)

// local opens a local coordinator in a new directory on the given clock.
func local(t *testing.T, now func() time.Time) *coordinator.DocCoordinator {
	t.Helper()
	c, err := coordinator.NewLocal(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func statusOf(t *testing.T, c coordinator.Coordinator) coordinator.Status {
	t.Helper()
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// record runs one successful turn that records loc.
func record(t *testing.T, c coordinator.Coordinator, holder, loc string) coordinator.State {
	t.Helper()
	st, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: holder, TTL: time.Minute},
		func(context.Context, coordinator.Lease) (coordinator.Report, error) {
			return coordinator.Report{Location: loc, Version: "1.0.0.0"}, nil
		})
	if err != nil {
		t.Fatalf("RunMaster recording %s: %v", loc, err)
	}
	return st
}

func sameState(a, b coordinator.State) bool {
	return a.Location == b.Location && a.Ticket == b.Ticket && a.Master == b.Master && a.Updated.Equal(b.Updated)
}

// untilDone waits for the run's context to end (the renewals stopping
// it), or fails after a deadline far beyond any TTL the tests use.
func untilDone(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return fmt.Errorf("run stopped: %w", context.Cause(ctx))
	case <-time.After(30 * time.Second):
		return errors.New("the run was never stopped")
	}
}

func TestRunMasterRecordsAndReleases(t *testing.T) {
	t.Parallel()
	c := local(t, nil)
	var granted coordinator.Lease
	st, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-a", TTL: time.Minute,
		Granted: func(l coordinator.Lease) { granted = l }},
		func(_ context.Context, l coordinator.Lease) (coordinator.Report, error) {
			if l.Holder != "dc-a" || l.State.Location != "" {
				return coordinator.Report{}, fmt.Errorf("lease %+v", l)
			}
			return coordinator.Report{Location: "/states/1", Version: "1.0.0.0"}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if st.Location != "/states/1" || st.Master != "dc-a" || st.Ticket != granted.Ticket || granted.Ticket == 0 {
		t.Fatalf("recorded %+v after granting %+v", st, granted)
	}
	if s := statusOf(t, c); s.Lock != nil || s.State.Location != "/states/1" {
		t.Fatalf("status after the turn: %+v", s)
	}
	// The next turn starts from the recorded state.
	_, err = coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-b"},
		func(_ context.Context, l coordinator.Lease) (coordinator.Report, error) {
			if l.State.Location != "/states/1" {
				return coordinator.Report{}, fmt.Errorf("second turn got state %+v", l.State)
			}
			return coordinator.Report{Location: "/states/2"}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRunMasterWaitsAndNamesTheHolder: while another master holds the
// lock, every refusal is reported with the holder; the turn starts once
// the holder releases it.
func TestRunMasterWaitsAndNamesTheHolder(t *testing.T) {
	t.Parallel()
	c := local(t, nil)
	held, err := c.Acquire(t.Context(), "dc-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var waits []coordinator.Waiting
	st, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-b", Retry: time.Millisecond,
		Waiting: func(w coordinator.Waiting) {
			waits = append(waits, w)
			if len(waits) == 3 { // the holder finishes (its run failed)
				if _, err := c.Report(context.Background(), held.Ticket, coordinator.Report{}); err != nil {
					t.Errorf("releasing dc-a: %v", err)
				}
			}
		}},
		func(_ context.Context, l coordinator.Lease) (coordinator.Report, error) {
			return coordinator.Report{Location: "/states/b"}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if len(waits) != 3 || st.Master != "dc-b" || st.Ticket <= held.Ticket {
		t.Fatalf("%d waits, state %+v (dc-a had ticket %d)", len(waits), st, held.Ticket)
	}
	for i, w := range waits {
		if w.Lock == nil || w.Lock.Holder != "dc-a" || w.Lock.Ticket != held.Ticket || !w.Lock.Expires.Equal(held.Expires) || w.Attempts != i+1 {
			t.Fatalf("wait %d: %+v, want dc-a's lock %+v", i, w, held)
		}
	}
}

func TestRunMasterGivesUpNamingTheHolder(t *testing.T) {
	t.Parallel()
	c := local(t, nil)
	if _, err := c.Acquire(t.Context(), "dc-a", time.Hour); err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-b", Retry: 10 * time.Millisecond, Wait: 50 * time.Millisecond},
		func(context.Context, coordinator.Lease) (coordinator.Report, error) {
			ran = true
			return coordinator.Report{Location: "/x"}, nil
		})
	if !errors.Is(err, coordinator.ErrLocked) || !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("RunMaster while dc-a holds the lock = %v (ran %v), want ErrLocked after the wait", err, ran)
	}
	for _, words := range []string{"dc-a holds it (ticket 1)", "unlock --force", "--lock-wait"} {
		if !strings.Contains(err.Error(), words) {
			t.Errorf("%v does not say %q", err, words)
		}
	}
}

// TestRunMasterStaleRenewalStopsTheRun: the holder's lock times out and
// another master takes it; the next renewal is refused, the run is
// stopped, RunMaster returns ErrStale and the state is not recorded.
func TestRunMasterStaleRenewalStopsTheRun(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	c := local(t, clock.Now)
	before := record(t, c, "dc-a", "/states/1")
	var taker coordinator.Lease
	_, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-a", TTL: 300 * time.Millisecond},
		func(ctx context.Context, l coordinator.Lease) (coordinator.Report, error) {
			clock.Advance(time.Hour) // the lock times out: dc-b takes it
			var err error
			if taker, err = c.Acquire(context.Background(), "dc-b", time.Hour); err != nil {
				return coordinator.Report{}, err
			}
			return coordinator.Report{}, untilDone(ctx)
		})
	if !errors.Is(err, coordinator.ErrStale) || !strings.Contains(err.Error(), "lost the write lock") {
		t.Fatalf("RunMaster after losing the lock = %v, want ErrStale", err)
	}
	s := statusOf(t, c)
	if !sameState(s.State, before) || s.Lock == nil || s.Lock.Ticket != taker.Ticket {
		t.Fatalf("status %+v: want the state %+v kept and dc-b's lock %d", s, before, taker.Ticket)
	}
}

// failingRenewals answers every Renew with err, without asking the
// backend.
type failingRenewals struct {
	coordinator.Coordinator
	err     error
	renewed atomic.Int32
}

func (f *failingRenewals) Renew(context.Context, uint64, time.Duration) (coordinator.Lease, error) {
	f.renewed.Add(1)
	return coordinator.Lease{}, f.err
}

// TestRunMasterStopsWhenNoRenewalSucceeds: renewals that fail without an
// answer (the backend unreachable) stop the run once a whole TTL has
// passed without one, with ErrStale: the lock may be someone else's.
func TestRunMasterStopsWhenNoRenewalSucceeds(t *testing.T) {
	t.Parallel()
	c := &failingRenewals{Coordinator: local(t, nil), err: fmt.Errorf("%w: injected", coordinator.ErrUnavailable)}
	_, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-a", TTL: 300 * time.Millisecond},
		func(ctx context.Context, _ coordinator.Lease) (coordinator.Report, error) {
			return coordinator.Report{}, untilDone(ctx)
		})
	if !errors.Is(err, coordinator.ErrStale) || !errors.Is(err, coordinator.ErrUnavailable) || !strings.Contains(err.Error(), "no renewal") {
		t.Fatalf("RunMaster with failing renewals = %v, want ErrStale naming the last error", err)
	}
	if n := c.renewed.Load(); n < 2 {
		t.Fatalf("%d renewals tried before giving up; want a retry before the TTL ran out", n)
	}
}

// TestRunMasterFinishedRunOnALostLockIsNotRecorded: a run that returns
// success although its lock was lost meanwhile is not reported as OK.
func TestRunMasterFinishedRunOnALostLockIsNotRecorded(t *testing.T) {
	t.Parallel()
	c := &failingRenewals{Coordinator: local(t, nil), err: fmt.Errorf("%w: injected", coordinator.ErrStale)}
	_, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-a", TTL: 300 * time.Millisecond},
		func(ctx context.Context, _ coordinator.Lease) (coordinator.Report, error) {
			<-ctx.Done() // a run that ignores the stop and succeeds
			return coordinator.Report{Location: "/states/late"}, nil
		})
	if !errors.Is(err, coordinator.ErrStale) || !strings.Contains(err.Error(), "not valid") {
		t.Fatalf("RunMaster = %v, want ErrStale saying the result is not valid", err)
	}
	if s := statusOf(t, c); s.State.Location != "" {
		t.Fatalf("state %+v recorded from a run that lost its lock", s.State)
	}
}

func TestRunMasterFailedRunKeepsTheStateAndReleases(t *testing.T) {
	t.Parallel()
	c := local(t, nil)
	before := record(t, c, "dc-a", "/states/1")
	boom := errors.New("bad input")
	_, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: "dc-b"},
		func(context.Context, coordinator.Lease) (coordinator.Report, error) {
			return coordinator.Report{Location: "/states/half"}, boom
		})
	if !errors.Is(err, boom) {
		t.Fatalf("RunMaster = %v, want the run's error", err)
	}
	s := statusOf(t, c)
	if !sameState(s.State, before) || s.Lock != nil {
		t.Fatalf("status after a failed run %+v: want the state %+v and the lock released", s, before)
	}
}

// lostReport applies a report but loses its answer, or refuses it without
// applying it.
type lostReport struct {
	coordinator.Coordinator
	apply bool
}

func (l lostReport) Report(ctx context.Context, ticket uint64, r coordinator.Report) (coordinator.State, error) {
	if !l.apply {
		return coordinator.State{}, fmt.Errorf("%w: injected refusal", coordinator.ErrStale)
	}
	if _, err := l.Coordinator.Report(ctx, ticket, r); err != nil {
		return coordinator.State{}, err
	}
	return coordinator.State{}, fmt.Errorf("%w: injected: the answer was lost", coordinator.ErrUnavailable)
}

func TestRunMasterReportCheckedAgainstTheRecord(t *testing.T) {
	t.Parallel()
	ok := func(context.Context, coordinator.Lease) (coordinator.Report, error) {
		return coordinator.Report{Location: "/states/new", Version: "1.0.0.1"}, nil
	}
	applied := lostReport{Coordinator: local(t, nil), apply: true}
	st, err := coordinator.RunMaster(t.Context(), applied, coordinator.MasterOptions{Holder: "dc-a"}, ok)
	if err != nil || st.Location != "/states/new" {
		t.Fatalf("a report applied but unanswered: %+v, %v; want the recorded state", st, err)
	}
	refused := lostReport{Coordinator: local(t, nil)}
	_, err = coordinator.RunMaster(t.Context(), refused, coordinator.MasterOptions{Holder: "dc-a"}, ok)
	if !errors.Is(err, coordinator.ErrStale) || !strings.Contains(err.Error(), "therefore not valid") {
		t.Fatalf("a refused report: %v; want ErrStale saying the state is not valid", err)
	}
}

// statusOnly is a coordinator whose Status answers st or err; nothing else
// may be called.
type statusOnly struct {
	coordinator.Coordinator
	st  coordinator.Status
	err error
}

func (s statusOnly) Status(context.Context) (coordinator.Status, error) { return s.st, s.err }

func TestCheckReportTrustsTheRecord(t *testing.T) {
	t.Parallel()
	const loc, ticket = "/states/new", 7
	ours := coordinator.Status{State: coordinator.State{Location: loc, Ticket: ticket}}
	other := coordinator.Status{State: coordinator.State{Location: "/states/old", Ticket: 5}}
	stale := fmt.Errorf("%w: refused", coordinator.ErrStale)
	lost := fmt.Errorf("%w: no answer", coordinator.ErrUnavailable)
	tests := []struct {
		name     string
		coord    statusOnly
		rerr     error
		recorded bool
		words    string
	}{
		{"refused but recorded", statusOnly{st: ours}, stale, true, ""},
		{"unanswered but recorded", statusOnly{st: ours}, lost, true, ""},
		{"refused", statusOnly{st: other}, stale, false, "therefore not valid"},
		{"unanswered", statusOnly{st: other}, lost, false, "unknown"},
		{"refused, status unknown", statusOnly{err: lost}, stale, false, "unknown"},
	}
	for _, tc := range tests {
		st, err := coordinator.CheckReport(t.Context(), tc.coord, ticket, loc, tc.rerr)
		if tc.recorded {
			if err != nil || st.Location != loc {
				t.Errorf("%s: CheckReport = %+v, %v; want the recorded state", tc.name, st, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.words) || !errors.Is(err, tc.rerr) {
			t.Errorf("%s: CheckReport = %v; want an error saying %q and wrapping %v", tc.name, err, tc.words, tc.rerr)
		}
		if tc.words == "unknown" && strings.Contains(err.Error(), "not valid") {
			t.Errorf("%s: %v claims the state is not valid", tc.name, err)
		}
	}
}

// TestRunMasterRacingMastersTakeTurns: masters running turns at once on
// one record never overlap, and every turn is recorded.
func TestRunMasterRacingMastersTakeTurns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var inside atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for m := range 4 {
		c, err := coordinator.NewLocal(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for r := range 2 {
				_, err := coordinator.RunMaster(t.Context(), c, coordinator.MasterOptions{Holder: fmt.Sprint("dc-", m), Retry: time.Millisecond},
					func(context.Context, coordinator.Lease) (coordinator.Report, error) {
						if n := inside.Add(1); n != 1 {
							return coordinator.Report{}, fmt.Errorf("%d masters run at once", n)
						}
						time.Sleep(5 * time.Millisecond) // a second grant meanwhile would be seen
						inside.Add(-1)
						return coordinator.Report{Location: fmt.Sprintf("/dc-%d/%d", m, r)}, nil
					})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	c, err := coordinator.NewLocal(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := statusOf(t, c); s.Lock != nil || s.LastTicket != 8 || s.State.Ticket != 8 {
		t.Fatalf("status after 8 turns: %+v", s)
	}
}
