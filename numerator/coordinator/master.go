package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults of MasterOptions.
const (
	// DefaultLockTTL is the write lock's time to live: a master renews it
	// every TTL/3 while it runs, so a master that dies (kill -9, a lost
	// machine) frees it within one TTL.
	DefaultLockTTL = 30 * time.Second
	// DefaultLockRetry is the wait between attempts while another master
	// holds the lock.
	DefaultLockRetry = 5 * time.Second
	// DefaultReportTimeout bounds the final report, which is made even
	// when the caller's context has ended.
	DefaultReportTimeout = 30 * time.Second
)

// MasterOptions are the settings of one master's turn (RunMaster).
type MasterOptions struct {
	// Holder is this master's name in the lock.
	Holder string
	// TTL is the lock's time to live; it is renewed every TTL/3 while the
	// run works. 0 means DefaultLockTTL.
	TTL time.Duration
	// Retry is the wait between attempts while another master holds the
	// lock. 0 means DefaultLockRetry.
	Retry time.Duration
	// Wait bounds the wait for the lock; 0 waits until ctx ends.
	Wait time.Duration
	// ReportTimeout bounds the final report. 0 means DefaultReportTimeout.
	ReportTimeout time.Duration
	// Waiting, if set, is called after every refused attempt, with the
	// lock as the coordinator shows it (so that a waiting master can say
	// who holds it and until when).
	Waiting func(Waiting)
	// Granted, if set, is called once the lock is granted, before the run.
	Granted func(Lease)
	// Logger receives warnings (a renewal or the report of a failed run
	// that failed); nil discards.
	Logger *slog.Logger
}

// Waiting describes a refused attempt to take the lock.
type Waiting struct {
	// Lock is the lock's holder as the coordinator showed it right after
	// the refusal; nil if it could not be read or was free by then.
	Lock *Lease
	// Waited is the time since the first attempt.
	Waited time.Duration
	// Attempts counts the attempts made so far.
	Attempts int
}

func (o MasterOptions) withDefaults() (MasterOptions, error) {
	if o.Holder == "" {
		return o, fmt.Errorf("%w: a master needs a name (--master-name)", ErrInvalid)
	}
	if o.TTL < 0 || o.Retry < 0 || o.Wait < 0 || o.ReportTimeout < 0 {
		return o, fmt.Errorf("%w: negative lock TTL %v, retry %v, wait %v or report timeout %v", ErrInvalid, o.TTL, o.Retry, o.Wait, o.ReportTimeout)
	}
	if o.TTL == 0 {
		o.TTL = DefaultLockTTL
	}
	if o.TTL < 10*time.Millisecond {
		return o, fmt.Errorf("%w: lock TTL %v is too short to be renewed every TTL/3; use seconds", ErrInvalid, o.TTL)
	}
	if o.Retry == 0 {
		o.Retry = DefaultLockRetry
	}
	if o.ReportTimeout == 0 {
		o.ReportTimeout = DefaultReportTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// RunMaster is one master's turn on the coordinator (N7):
//
//  1. it waits for the write lock, calling o.Waiting after every refusal;
//  2. it calls run with the lease (whose State is the last consistent
//     state, the one the run must start from), renewing the lock every
//     TTL/3 meanwhile; a renewal refused as stale, or no renewal
//     succeeding for a whole TTL, cancels run's context, and RunMaster
//     then returns an error wrapping ErrStale;
//  3. if run succeeds, it reports the run's Report (OK set) under the
//     lease's ticket and returns the recorded state; if run fails, it
//     reports the failure (the state stays, the lock is released) and
//     returns run's error.
//
// A report that fails is checked against the coordinator's record: if the
// record holds the new state (the report was applied, its answer lost),
// RunMaster succeeds; if the report was refused (ErrStale) and the record
// does not hold it, the error says the new state is not valid; otherwise
// it says the outcome is unknown.
func RunMaster(ctx context.Context, c Coordinator, o MasterOptions, run func(ctx context.Context, l Lease) (Report, error)) (State, error) {
	o, err := o.withDefaults()
	if err != nil {
		return State{}, err
	}
	lease, granted, err := acquireWaiting(ctx, c, o)
	if err != nil {
		return State{}, err
	}
	if o.Granted != nil {
		o.Granted(lease)
	}

	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	lost := make(chan error, 1)
	go func() { lost <- renewWhileRunning(runCtx, c, o, lease.Ticket, granted, stop) }()
	rep, runErr := run(runCtx, lease)
	stop(errRunDone)
	lostErr := <-lost

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.ReportTimeout)
	defer cancel()
	if runErr != nil || lostErr != nil {
		// A failed run reports failure so that the next master need not
		// wait out the TTL; the state stays as it was.
		if _, rerr := c.Report(rctx, lease.Ticket, Report{OK: false}); rerr != nil && lostErr == nil {
			o.Logger.Warn("reporting the failed run", "ticket", lease.Ticket, "err", rerr)
		}
		switch {
		case runErr == nil:
			return State{}, fmt.Errorf("the run finished but its result is not valid: %w", lostErr)
		case lostErr != nil:
			return State{}, fmt.Errorf("%w (the run was stopped: %w)", runErr, lostErr)
		}
		return State{}, runErr
	}
	rep.OK = true
	st, err := c.Report(rctx, lease.Ticket, rep)
	if err != nil {
		if st, err = CheckReport(rctx, c, lease.Ticket, rep.Location, err); err != nil {
			return State{}, err
		}
		o.Logger.Warn("the report failed but the coordinator recorded the new state", "location", rep.Location, "ticket", lease.Ticket)
	}
	return st, nil
}

// errRunDone stops the renewals once the run has returned.
var errRunDone = errors.New("coordinator: the run returned")

// acquireWaiting takes the lock, waiting while another master holds it.
// It returns the lease and when the granting call was sent (the lease
// cannot expire before that time + TTL).
func acquireWaiting(ctx context.Context, c Coordinator, o MasterOptions) (Lease, time.Time, error) {
	start := time.Now()
	if o.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.Wait, fmt.Errorf("waited %v, the wait limit (--lock-wait): %w", o.Wait, context.DeadlineExceeded))
		defer cancel()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	var last *Lease
	for attempts := 1; ; attempts++ {
		select {
		case <-ctx.Done():
			return Lease{}, time.Time{}, gaveUp(ctx, last, time.Since(start))
		case <-t.C:
		}
		sent := time.Now()
		l, err := c.Acquire(ctx, o.Holder, o.TTL)
		switch {
		case err == nil:
			return l, sent, nil
		case ctx.Err() != nil:
			return Lease{}, time.Time{}, gaveUp(ctx, last, time.Since(start))
		case !errors.Is(err, ErrLocked):
			return Lease{}, time.Time{}, fmt.Errorf("write lock: %w", err)
		}
		w := Waiting{Waited: time.Since(start), Attempts: attempts}
		if st, serr := c.Status(ctx); serr == nil && st.Lock != nil {
			w.Lock, last = st.Lock, st.Lock
		}
		if o.Waiting != nil {
			o.Waiting(w)
		}
		t.Reset(o.Retry)
	}
}

// gaveUp names the holder the wait ended on, and what to do.
func gaveUp(ctx context.Context, holder *Lease, waited time.Duration) error {
	cause := context.Cause(ctx)
	if holder == nil {
		return fmt.Errorf("%w: gave up waiting for the write lock after %v: %w", ErrLocked, waited.Round(time.Millisecond), cause)
	}
	return fmt.Errorf("%w: gave up waiting for the write lock after %v: %s holds it (ticket %d) since %s, until %s unless it renews it; "+
		"if that master is dead its lock expires then, and `shardkit numerator unlock --force` frees it at once: %w",
		ErrLocked, waited.Round(time.Millisecond), holder.Holder, holder.Ticket,
		holder.Acquired.Format(time.RFC3339), holder.Expires.Format(time.RFC3339), cause)
}

// renewWhileRunning renews the lock every TTL/3 until ctx ends. A renewal
// refused as stale, or none succeeding for a whole TTL since the last one
// was sent, stops the run (stop) and is returned; nil when the run ended
// first.
func renewWhileRunning(ctx context.Context, c Coordinator, o MasterOptions, ticket uint64, granted time.Time, stop context.CancelCauseFunc) error {
	every := o.TTL / 3
	t := time.NewTicker(every)
	defer t.Stop()
	valid := granted.Add(o.TTL) // by this process's clock, the lock cannot have expired before
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, max(every, time.Second))
		_, err := c.Renew(cctx, ticket, o.TTL)
		cancel()
		var lost error
		switch {
		case err == nil:
			valid = sent.Add(o.TTL)
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrStale):
			lost = fmt.Errorf("lost the write lock: %w", err)
		case !time.Now().Before(valid):
			lost = fmt.Errorf("%w: no renewal of ticket %d succeeded within the lock TTL %v, so the lock may have passed to another master (last error: %w)",
				ErrStale, ticket, o.TTL, err)
		default:
			o.Logger.Warn("renewing the write lock failed; retrying", "ticket", ticket, "valid_until", valid, "err", err)
			continue
		}
		stop(lost)
		return lost
	}
}

// CheckReport decides what a failed report of the new state at loc means:
// a report can fail although it was recorded (its answer was lost), so the
// coordinator's record decides. It returns the recorded state if it is the
// new one, else an error that says "not valid" only for a refusal
// (ErrStale) the record confirms, and "unknown" otherwise.
func CheckReport(ctx context.Context, c Coordinator, ticket uint64, loc string, rerr error) (State, error) {
	cur, serr := c.Status(ctx)
	switch {
	case serr == nil && cur.State.Ticket == ticket && cur.State.Location == loc:
		return cur.State, nil
	case serr == nil && errors.Is(rerr, ErrStale):
		return State{}, fmt.Errorf("the coordinator refused the new state %s, which is therefore not valid (the recorded state is %q): %w",
			loc, cur.State.Location, rerr)
	default:
		return State{}, fmt.Errorf("whether the coordinator recorded the new state %s is unknown; see `shardkit numerator status` before using it: %w",
			loc, errors.Join(rerr, serr))
	}
}
