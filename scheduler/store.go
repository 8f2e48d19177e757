package scheduler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
)

// Store is the seam between the Runner and where offers live: PostgreSQL
// (scheduler/pgstore) or a shardkit cluster. Every store passes
// scheduler/storetest. Implementations are safe for concurrent use.
//
// Everything of one offer (its body, its stages' states, its queue and
// queue_inverted rows, its changed-offer mark) lives in the offer's shard,
// ShardOf(id, Shards()), so that a store sharded by offer id does each
// write below in one atomic batch of one shard.
//
// Writes a Runner makes carry the shard's Lease and are fenced: a store
// writes nothing when the lease's epoch is no longer the shard's current
// one, and answers ErrFenced.
type Store interface {
	// Shards is the fixed number of shards.
	Shards() int

	// Claim takes those of shards that are free, expired (by the store's
	// clock) or already held by owner, each with a new, higher epoch and
	// ttl, and returns the leases it got (possibly none).
	Claim(ctx context.Context, owner string, shards []int, ttl time.Duration) ([]Lease, error)
	// Renew extends l by ttl while it is still the shard's lease and has
	// not expired; otherwise ErrFenced.
	Renew(ctx context.Context, l Lease, ttl time.Duration) error
	// Release frees l's shard at once if l is still its lease; otherwise
	// ErrFenced.
	Release(ctx context.Context, l Lease) error
	// Leases lists every shard's holder.
	Leases(ctx context.Context) ([]LeaseInfo, error)
	// Announce says owner is alive for ttl (by the store's clock), so that
	// runners share the shards with it before it holds any.
	Announce(ctx context.Context, owner string, ttl time.Duration) error
	// Runners lists the owners whose announcement has not expired.
	Runners(ctx context.Context) ([]string, error)

	// Put writes an offer from outside (S12): created when ifVersion is 0
	// (ErrConflict if it exists), else replaced when its version is still
	// ifVersion (else ErrConflict); AnyVersion skips the check. It marks
	// the offer changed (with the fields that changed) and writes its
	// changelog record. It returns the new version.
	Put(ctx context.Context, id string, body []byte, ifVersion int64) (int64, error)
	// Load reads an offer and, when stage is not empty, that stage's state,
	// each with its version. A missing offer has Version 0 (no error).
	Load(ctx context.Context, id, stage string) (Offer, State, error)
	// UpdateState sets a stage's state of an offer from outside (S9): only
	// when its version is still version (0: it has none); reports whether
	// it did.
	UpdateState(ctx context.Context, id, stage string, state *anypb.Any, version int64) (bool, error)
	// Save writes a stage's Process result atomically (S4), see Save.
	Save(ctx context.Context, l Lease, s Save) (Saved, error)
	// SaveMany writes saves of l's shard, each as Save writes it, in one
	// call (the Runner gathers the saves of its concurrent Process calls
	// of a shard). saved[i] and errs[i] are saves[i]'s outcome: a refusal
	// of one save (ErrConflict, ErrNotFound, ErrInvalid; ErrInvalid too for
	// an offer that is in saves twice) writes nothing of it and does not
	// stop the others. err is the call's: ErrFenced, or a failure of the
	// store, after which any of the saves may or may not be written. Each
	// save is atomic; a store may write them all in one atomic write.
	SaveMany(ctx context.Context, l Lease, saves []Save) (saved []Saved, errs []error, err error)

	// Offer puts an offer in a stage's queue (S14): true if it was not
	// there (in either lane) and now is; an entry due later than e.Due, or
	// in the rescan lane when e is in the main one, is moved to e's due
	// time (the earlier of the two) in the main lane if either is there,
	// and takes e's Timer (true); otherwise false and nothing changes.
	Offer(ctx context.Context, l Lease, e Entry) (bool, error)
	// OfferMany offers entries of l's shard, each as Offer does, in order
	// (an entry sees the queue as the earlier ones left it), in one call;
	// queued[i] is entries[i]'s answer. A bad entry refuses the call
	// (ErrInvalid, naming it) before anything is written.
	OfferMany(ctx context.Context, l Lease, entries []Entry) (queued []bool, err error)
	// Peek returns up to limit entries of a stage in l's shard due at or
	// before now, the main lane's before the rescan lane's, each lane's in
	// due order, and when the earliest later entry is due (zero if none).
	Peek(ctx context.Context, l Lease, stage string, now time.Time, limit int) ([]Entry, time.Time, error)
	// Delete takes an offer out of a stage's queue (no error if absent).
	Delete(ctx context.Context, l Lease, stage, id string) error
	// Check lists the queues that hold an offer, by stage.
	Check(ctx context.Context, shard int, id string) ([]Entry, error)
	// Retry records a failed attempt of an entry: attempts+1, the error,
	// and the entry due again at at. It returns the attempts so far
	// (ErrNotFound if the entry is gone).
	Retry(ctx context.Context, l Lease, stage, id string, at time.Time, cause string) (int, error)

	// Changes lists up to limit changed-offer marks of l's shard (S11–S12,
	// S23). A mark stays until AckChange, so a runner that dies before
	// asking the stages loses no trigger.
	Changes(ctx context.Context, l Lease, limit int) ([]Change, error)
	// AckChange removes c's mark unless the offer changed again since it
	// was read (a newer Seq).
	AckChange(ctx context.Context, l Lease, c Change) error
	// AckChanges acks changes of l's shard, each as AckChange does, in one
	// call. A bad change refuses the call (ErrInvalid, naming it) before
	// anything is written.
	AckChanges(ctx context.Context, l Lease, cs []Change) error
	// Scan lists offer ids of a shard after the id after, in id order (the
	// background rescan, S13).
	Scan(ctx context.Context, shard int, after string, limit int) ([]string, error)

	// AfterSaves lists up to limit offers whose saves by stage still wait
	// for its AfterSave hook; AfterSaveDone removes one unless it was saved
	// again after the seq read.
	AfterSaves(ctx context.Context, l Lease, stage string, limit int) ([]Pending, error)
	AfterSaveDone(ctx context.Context, l Lease, p Pending) error

	// DeadLetter moves an entry out of its stage's queue into the stage's
	// dead letters, with why.
	DeadLetter(ctx context.Context, l Lease, stage, id, cause string) error
	// DeadLetters lists a stage's dead letters.
	DeadLetters(ctx context.Context, stage string, limit int) ([]DeadLetter, error)
	// Requeue moves a dead letter back into its stage's queue, due at at
	// (ErrNotFound if there is none).
	Requeue(ctx context.Context, stage, id string, at time.Time) error

	// Stats says how many entries a stage's queue holds over all shards,
	// and when its earliest one is due (zero if none).
	Stats(ctx context.Context, stage string) (depth int, earliest time.Time, err error)
	// Wakeups delivers a Wakeup after writes that may give a runner work,
	// until ctx ends (then it is closed). Deliveries may be dropped or
	// merged: a runner polls too.
	Wakeups(ctx context.Context) (<-chan Wakeup, error)

	// Close releases the store's resources.
	Close() error
}

// AnyVersion makes Put skip its version check.
const AnyVersion int64 = -1

// CheckStateUpdate checks UpdateState's arguments as every store does.
func CheckStateUpdate(id, stage string, state *anypb.Any) error {
	if err := ValidateID("offer", id); err != nil {
		return err
	}
	if err := ValidateID("stage", stage); err != nil {
		return err
	}
	if state == nil {
		return fmt.Errorf("%w: no state given for stage %q of offer %q", ErrInvalid, stage, id)
	}
	return nil
}

// PutOffer is Put's arguments, for the stores' bulk puts (PutMany).
type PutOffer struct {
	ID        string
	Body      []byte
	IfVersion int64
}

// Check checks p as Put does, and makes an empty body {}.
func (p *PutOffer) Check() error {
	if err := ValidateID("offer", p.ID); err != nil {
		return err
	}
	if len(bytes.TrimSpace(p.Body)) == 0 {
		p.Body = []byte("{}")
	}
	if err := CheckBody(p.Body); err != nil {
		return err
	}
	if p.IfVersion < AnyVersion {
		return fmt.Errorf("%w: offer %q: version %d: use 0 (create), a version, or AnyVersion", ErrInvalid, p.ID, p.IfVersion)
	}
	return nil
}

// Lease is a runner's holding of a shard; Epoch fences its writes.
type Lease struct {
	Shard int
	Owner string
	Epoch int64
}

func (l Lease) String() string {
	return fmt.Sprintf("shard %d epoch %d owner %q", l.Shard, l.Epoch, l.Owner)
}

// LeaseInfo is a shard's holder as the store sees it.
type LeaseInfo struct {
	Shard   int
	Owner   string // "" when free
	Epoch   int64
	Expired bool // true for a free shard too
}

// Lane is one of a stage's two queues.
type Lane uint8

const (
	// LaneMain holds triggered offers, timers and retries.
	LaneMain Lane = iota
	// LaneRescan holds the background rescan's offers, taken only when the
	// main lane has nothing due (S13).
	LaneRescan
)

func (l Lane) String() string {
	if l == LaneRescan {
		return "rescan"
	}
	return "main"
}

// Entry is an offer in a stage's queue.
type Entry struct {
	Shard   int
	Stage   string
	OfferID string
	Due     time.Time
	Lane    Lane
	// Timer: the stage set it (S3), or ShouldProcess asked for a time.
	Timer bool
	// Attempts are the failed Process calls so far; LastError the last.
	Attempts  int
	LastError string
}

// Save is one stage's result to write atomically (Store.Save). Exactly one
// queue entry is consumed: the stage's entry of the offer; with Timer not
// zero, a new one is put due then.
type Save struct {
	OfferID string
	Stage   string
	// ReadVersion is the offer's version the stage read. Unless Patch is
	// set, the save is refused with ErrConflict when the offer has another
	// version now (also for a save of only state or timer: the stage saw
	// an old offer). A patch is applied anyway; when the offer had changed
	// since the read, its mark names no Source, so the stage too is asked
	// about the newer offer (and a patch that changed nothing leaves the
	// stage's entry due, so it runs again on that offer).
	ReadVersion int64
	// Body replaces the offer's body (checked against ReadVersion); or
	// Patch is applied to its current body without the check. At most one.
	Body  []byte
	Patch Patch
	// Fields are the fields Body changed (nil: unknown, every field).
	Fields []string
	// State, when not nil, replaces the stage's state, which must still be
	// at StateVersion (else ErrConflict).
	State        *anypb.Any
	StateVersion int64
	// Timer, when not zero, queues the offer for the stage due then.
	Timer time.Time
	// Chain is the loop guard's count to store with the changed offer.
	Chain int
	// AfterSave records the save for the stage's AfterSave hook.
	AfterSave bool
}

// Saved is what Save wrote.
type Saved struct {
	OfferVersion int64
	StateVersion int64
	// Changed: the offer's body changed (a changed-offer mark was made).
	Changed bool
}

// Change is a changed-offer mark: every stage but Source (all when Source
// is empty) is to be asked whether it wants the offer.
type Change struct {
	Shard   int
	OfferID string
	// Seq tells marks of one offer apart: a change after the read makes a
	// newer Seq, and AckChange then leaves the mark.
	Seq int64
	// Source is the stage whose save changed the offer ("" for an outside
	// write, or several changes merged).
	Source string
	// Fields that changed, sorted (nil: every field).
	Fields []string
	// Chain is the loop guard's count (Offer.Chain after the change).
	Chain int
}

// Pending is a save waiting for its stage's AfterSave hook.
type Pending struct {
	Shard   int
	Stage   string
	OfferID string
	Seq     int64
}

// DeadLetter is an offer a stage gave up on.
type DeadLetter struct {
	Stage    string
	OfferID  string
	Attempts int
	Cause    string
	At       time.Time
}

// Wakeup says where there may be new work. A Shard of -1 means any shard;
// a Stage of "" means the changed-offer marks (or every stage when Shard is
// -1).
type Wakeup struct {
	Shard int
	Stage string
}

// OncePerOffer is the input check of a store's batch call (SaveMany,
// PutMany) over n items: check(i) checks item i, id(i) names its offer. It
// returns, in order, the items that passed and name an offer no earlier
// passing item named; errs[i] is the refusal of each other one (an offer
// given twice is ErrInvalid, naming both items).
func OncePerOffer(call string, n int, check func(i int) error, id func(i int) string) (todo []int, errs []error) {
	errs = make([]error, n)
	first := map[string]int{}
	for i := range n {
		if errs[i] = check(i); errs[i] != nil {
			continue
		}
		if j, dup := first[id(i)]; dup {
			errs[i] = fmt.Errorf("%w: offer %q is in one %s twice (items %d and %d)", ErrInvalid, id(i), call, j, i)
			continue
		}
		first[id(i)] = i
		todo = append(todo, i)
	}
	return todo, errs
}

// WakeupSender delivers a store's wake-ups on its Wakeups channel, never
// waiting for the runner: when the channel's buffer is full a wake-up is
// dropped, and a wake-up for every shard (Shard -1) goes before the next
// one, so that a dropped wake-up costs the runner a read of every shard
// rather than a wait for its poll. One goroutine sends with it.
type WakeupSender struct {
	ch   chan<- Wakeup
	lost bool
}

// NewWakeupSender sends on ch.
func NewWakeupSender(ch chan<- Wakeup) *WakeupSender { return &WakeupSender{ch: ch} }

// Send delivers w, or notes that a wake-up was dropped.
func (s *WakeupSender) Send(w Wakeup) {
	if s.lost {
		// The wake-up for every shard covers w too.
		s.lost = !s.try(Wakeup{Shard: -1})
		return
	}
	s.lost = !s.try(w)
}

func (s *WakeupSender) try(w Wakeup) bool {
	select {
	case s.ch <- w:
		return true
	default:
		return false
	}
}

// Record is the changelog's record of one save (S6, S12): the offer and,
// for a stage's save, the stage's state, as written. Stores put it in
// their outbox (or change stream) in the same atomic write, and it reaches
// Kafka keyed by OfferID. Consumers drop duplicates by (OfferID,
// OfferVersion, Stage, StateVersion).
type Record struct {
	OfferID      string          `json:"offer_id"`
	Shard        int             `json:"shard"`
	OfferVersion int64           `json:"offer_version"`
	Body         json.RawMessage `json:"body"`
	// Stage is the stage whose save this is ("" for an outside Put).
	Stage        string `json:"stage,omitempty"`
	StateType    string `json:"state_type,omitempty"`
	State        []byte `json:"state,omitempty"`
	StateVersion int64  `json:"state_version,omitempty"`
	// Time is when the store wrote it (its own clock).
	Time time.Time `json:"time"`
}
