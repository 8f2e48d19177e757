package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Errors of this package.
var (
	// ErrLocked: another master holds the write lock.
	ErrLocked = errors.New("coordinator: write lock held by another master")
	// ErrStale: the ticket is not the current holder's (it timed out and was
	// dropped, or another master has the lock since).
	ErrStale = errors.New("coordinator: stale ticket")
	// ErrInvalid: bad arguments.
	ErrInvalid = errors.New("coordinator: invalid request")
	// ErrCorrupt: the stored record cannot be decoded.
	ErrCorrupt = errors.New("coordinator: stored record corrupt")
	// ErrUnavailable: the backend cannot be used.
	ErrUnavailable = errors.New("coordinator: backend unavailable")
)

// State is the last consistent state.
type State struct {
	Location string    `json:"location"` // "" until the first report
	Version  string    `json:"version"`  // T.S.V.G of the state, informational
	Master   string    `json:"master"`   // who wrote it
	Ticket   uint64    `json:"ticket"`   // the ticket of the run that wrote it
	Updated  time.Time `json:"updated"`
}

// Lease is a granted write lock.
type Lease struct {
	Holder   string    `json:"holder"`
	Ticket   uint64    `json:"ticket"`
	Acquired time.Time `json:"acquired"`
	Expires  time.Time `json:"expires"`
	// State is the last consistent state when the lock was granted: the
	// one the holder must start from.
	State State `json:"-"`
}

// Report ends a holder's turn.
type Report struct {
	OK       bool   // false: the run failed; the state stays as it was
	Location string // the new state, when OK
	Version  string
}

// Status is what the coordinator knows.
type Status struct {
	State      State
	Lock       *Lease // nil when free; it may have expired
	LastTicket uint64
}

// Coordinator is a fenced write lock plus the record of the last consistent
// state. Implementations are safe for concurrent use; tickets grow strictly
// with every grant.
type Coordinator interface {
	// Acquire grants the lock to holder for timeout if it is free or its
	// holder timed out (which drops that holder); otherwise ErrLocked.
	Acquire(ctx context.Context, holder string, timeout time.Duration) (Lease, error)
	// Renew extends the current holder's lock; ErrStale if ticket is not
	// current or has timed out.
	Renew(ctx context.Context, ticket uint64, timeout time.Duration) (Lease, error)
	// Report records the holder's result (the new state, if OK) and
	// releases the lock; ErrStale if ticket is not current or has timed out.
	Report(ctx context.Context, ticket uint64, r Report) (State, error)
	// Status reads the state record and the lock.
	Status(ctx context.Context) (Status, error)
	// ForceUnlock drops the write lock whoever holds it (an operator's
	// `shardkit numerator unlock --force`): the holder's ticket is stale
	// from then on (its renewals and report are refused), the recorded
	// state stays, and the next Acquire gets a larger ticket. It returns
	// the lock it dropped, nil when the lock was free.
	ForceUnlock(ctx context.Context) (*Lease, error)
	Close() error
}

// AcquireWait calls Acquire every retry until it is granted, ctx ends, or an
// error other than ErrLocked happens.
func AcquireWait(ctx context.Context, c Coordinator, holder string, timeout, retry time.Duration) (Lease, error) {
	if retry <= 0 {
		return Lease{}, fmt.Errorf("%w: retry interval %v must be positive", ErrInvalid, retry)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return Lease{}, fmt.Errorf("coordinator: gave up waiting for the write lock: %w", context.Cause(ctx))
		case <-t.C:
		}
		l, err := c.Acquire(ctx, holder, timeout)
		if !errors.Is(err, ErrLocked) {
			return l, err
		}
		t.Reset(retry)
	}
}
