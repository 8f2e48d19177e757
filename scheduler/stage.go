package scheduler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/types/known/anypb"
)

// Stage is code that may change an offer after an event: the offer was
// created or changed, or the stage's timer came due (S1, S7). Both methods
// must be pure: the Runner may call them again at any time (retries,
// conflicts), and side effects belong in AfterSave or in a consumer of the
// changelog. A Stage is called concurrently for different offers.
type Stage interface {
	// ShouldProcess says, fast, whether the offer should enter the stage's
	// queue after it changed: Skip, Now or At a time. An error queues the
	// offer anyway (now), so Process must check again that its work is
	// needed.
	ShouldProcess(ctx context.Context, offer Offer, state State) (Decision, error)
	// Process does the stage's work: it returns the offer's new body or a
	// patch on the stage's own fields (or neither), its new state (or
	// none, to keep it) and its next timer (or none).
	Process(ctx context.Context, offer Offer, state State) (Result, error)
}

// AfterSaver is a Stage with side effects: AfterSave is called, at least
// once, after each save of the stage's Process, with the offer and the
// state as saved then or later (saves that come before it ran coalesce).
// An error retries it with backoff.
type AfterSaver interface {
	AfterSave(ctx context.Context, offer Offer, state State) error
}

// Decision is ShouldProcess's answer.
type Decision struct {
	kind decisionKind
	at   time.Time
}

type decisionKind uint8

const (
	decideSkip decisionKind = iota
	decideNow
	decideAt
)

// Skip: the offer does not enter the stage's queue.
func Skip() Decision { return Decision{kind: decideSkip} }

// Now: the offer enters the stage's queue, due at once.
func Now() Decision { return Decision{kind: decideNow} }

// At: the offer enters the stage's queue, due at t (a timer).
func At(t time.Time) Decision { return Decision{kind: decideAt, at: t} }

// Due tells where the decision puts the offer: not in the queue (false),
// or in it due at once (true, a zero time) or at a time.
func (d Decision) Due() (at time.Time, queued bool) {
	switch d.kind {
	case decideNow:
		return time.Time{}, true
	case decideAt:
		return d.at, true
	}
	return time.Time{}, false
}

func (d Decision) String() string {
	switch d.kind {
	case decideNow:
		return "now"
	case decideAt:
		return "at " + d.at.UTC().Format(time.RFC3339Nano)
	}
	return "skip"
}

// Result is Process's answer.
type Result struct {
	// Body is the offer's new body (a JSON object), checked against the
	// version Process read: when the offer changed since, the stage runs
	// again on the new version. nil: no new body.
	Body []byte
	// Patch sets fields the stage owns, on whatever the offer's body is
	// when saved (no version check). Not with Body.
	Patch Patch
	// State is the stage's new state; nil keeps the one it had.
	State *anypb.Any
	// Timer, when not zero, puts the offer in the stage's queue due then.
	// The stage's earlier timer ends with this Process: a stage returns
	// the timer it still wants every time.
	Timer time.Time
}

// StageConfig is one stage and how the Runner treats it.
type StageConfig struct {
	// ID names the stage (its queue, state and metrics); required.
	ID    string
	Stage Stage
	// Fields are the top-level offer fields the stage reacts to: after a
	// change of none of them, it is not asked (S13). nil: every change.
	Fields []string
	// OwnFields are the fields the stage may patch.
	OwnFields []string
	// RateLimit caps the stage's Process calls per second over all the
	// runners of its store (0: no cap): each of n live runners (those
	// announced or holding shards) takes RateLimit / n, recomputed every
	// third of LeaseTTL; Burst (default 1) is each runner's.
	RateLimit rate.Limit
	Burst     int
	// MaxParallel caps concurrent Process calls of the stage over all the
	// runners of its store (default 4): each of n live runners takes
	// MaxParallel / n (at least one), as with RateLimit.
	MaxParallel int
	// MaxAttempts: after this many failed Process calls in a row, the
	// offer goes to the stage's dead letters (default 5).
	MaxAttempts int
	// Timeout bounds one Process, ShouldProcess or AfterSave call
	// (default 30 s).
	Timeout time.Duration
}

const (
	defaultMaxParallel = 4
	defaultMaxAttempts = 5
	defaultTimeout     = 30 * time.Second
)

func (c *StageConfig) fill() error {
	if err := ValidateID("stage", c.ID); err != nil {
		return err
	}
	if c.Stage == nil {
		return fmt.Errorf("%w: stage %q has no Stage", ErrInvalid, c.ID)
	}
	if c.MaxParallel < 0 || c.MaxAttempts < 0 || c.Timeout < 0 || c.RateLimit < 0 || c.Burst < 0 {
		return fmt.Errorf("%w: stage %q: MaxParallel, MaxAttempts, Timeout, RateLimit and Burst must not be negative", ErrInvalid, c.ID)
	}
	if c.MaxParallel == 0 {
		c.MaxParallel = defaultMaxParallel
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = defaultMaxAttempts
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.Burst == 0 {
		c.Burst = 1
	}
	return nil
}

// interested reports whether a change of changed (nil: every field) is one
// the stage reacts to.
func (c *StageConfig) interested(changed []string) bool {
	if c.Fields == nil || changed == nil {
		return true
	}
	for _, f := range changed {
		if slices.Contains(c.Fields, f) {
			return true
		}
	}
	return false
}

// checkResult refuses a Result the stage may not return, naming the stage
// and what was wrong.
func (c *StageConfig) checkResult(r Result) error {
	if r.Body != nil && r.Patch != nil {
		return fmt.Errorf("%w: stage %q returned both a body and a patch; return one", ErrInvalid, c.ID)
	}
	if r.Body != nil {
		if err := CheckBody(r.Body); err != nil {
			return fmt.Errorf("stage %q returned a bad body: %w", c.ID, err)
		}
	}
	for f := range r.Patch {
		if !slices.Contains(c.OwnFields, f) {
			return fmt.Errorf("%w: stage %q patched field %q, which is not among its OwnFields %v", ErrInvalid, c.ID, f, c.OwnFields)
		}
	}
	return nil
}
