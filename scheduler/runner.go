package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Config is what a Runner runs and how.
type Config struct {
	// Store holds the offers (required).
	Store Store
	// Stages are run by this Runner (at least one; ids unique). Every
	// runner of one store must run the same stages.
	Stages []StageConfig
	// Owner names this runner in the shard leases (default: host, pid and
	// a random suffix). It must be unique among live runners.
	Owner string
	// LeaseTTL is the shard leases' time: a dead runner's shards are taken
	// over after it (default 10 s). Leases are renewed every third of it.
	LeaseTTL time.Duration
	// MaxShards caps the shards this runner holds (0: a fair share, the
	// shards divided by the live runners, rounded up; runners announce
	// themselves in the store every third of LeaseTTL).
	MaxShards int
	// PollInterval is how often the runner reads every held shard's
	// queues and marks without a wake-up from the store (default 10 s;
	// real time). Wake-ups name the shard and stage with new work, and a
	// runner reads only those (and the shards whose next timer came due),
	// so the poll is for a wake-up the store could not deliver.
	PollInterval time.Duration
	// MaxChain is the loop guard: a change made by the MaxChain+1-th stage
	// save in a row (no outside write, timer or rescan between) is not
	// passed on to the other stages, and is counted (default 16).
	MaxChain int
	// RetryInitial and RetryMax bound the backoff of a failed Process:
	// RetryInitial after the first failure, doubling up to RetryMax
	// (defaults 1 s and 5 min).
	RetryInitial, RetryMax time.Duration
	// MaxConflicts: after this many conflicting saves in a row, a Process
	// counts as failed and is retried later (default 16).
	MaxConflicts int
	// RescanEvery starts a background rescan of every held shard through
	// the stages' low-priority lanes this often (0: never).
	RescanEvery time.Duration
	// BatchSize is how many changed-offer marks one store read takes, and
	// how many saves one SaveMany carries at most (default 64).
	BatchSize int
	// Clock (default SystemClock).
	Clock Clock
	// Logger (default: none).
	Logger *slog.Logger
	// Registerer receives the per-stage metrics (nil: not exported).
	Registerer prometheus.Registerer
}

func (c *Config) fill() error {
	if c.Store == nil {
		return fmt.Errorf("%w: Config.Store is nil", ErrInvalid)
	}
	if len(c.Stages) == 0 {
		return fmt.Errorf("%w: no stage: give the runner at least one", ErrInvalid)
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	defaults := []struct {
		d   *time.Duration
		def time.Duration
	}{{&c.LeaseTTL, 10 * time.Second}, {&c.PollInterval, 10 * time.Second}, {&c.RetryInitial, time.Second}, {&c.RetryMax, 5 * time.Minute}}
	for _, d := range defaults {
		if *d.d < 0 {
			return fmt.Errorf("%w: a negative duration in Config (%v)", ErrInvalid, *d.d)
		}
		if *d.d == 0 {
			*d.d = d.def
		}
	}
	if c.MaxShards < 0 || c.MaxChain < 0 || c.MaxConflicts < 0 || c.BatchSize < 0 || c.RescanEvery < 0 {
		return fmt.Errorf("%w: MaxShards, MaxChain, MaxConflicts, BatchSize and RescanEvery must not be negative", ErrInvalid)
	}
	if c.MaxChain == 0 {
		c.MaxChain = 16
	}
	if c.MaxConflicts == 0 {
		c.MaxConflicts = 16
	}
	if c.BatchSize == 0 {
		c.BatchSize = 64
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Runner processes the queues of the shards it holds (see the package
// comment for its loop). Make one with NewRunner and start it with Run.
type Runner struct {
	cfg    Config
	store  Store
	clock  Clock
	log    *slog.Logger
	stages []*stageRun
	byID   map[string]*stageRun
	m      *metrics

	// changes is the shards whose changed-offer marks to read.
	changes *shardWants

	mu     sync.Mutex
	leases map[int]*held
	busy   map[string]string // offer id -> the stage processing it
	// deferred: offers whose mark the changed-offer pass left for when
	// their stage's call ends (the call's end wants their shard's marks).
	deferred map[string]bool

	// The saves waiting for their shard's SaveMany, and the shards whose
	// saver runs (save, flushSaves).
	saveMu      sync.Mutex
	savePending map[int][]*saveCall
	saveBusy    map[int]bool
}

type held struct {
	Lease
	renewed time.Time // real time of the last successful claim or renewal
}

type stageRun struct {
	cfg     StageConfig
	limiter *rate.Limiter
	sem     chan struct{}
	// allowed is this runner's share of MaxParallel (0: all of it).
	allowed atomic.Int32
	// wants is the shards whose queue of the stage to peek, afterWants
	// those whose pending AfterSave calls to make.
	wants, afterWants *shardWants
	after             AfterSaver
	// Under Runner.mu: the stage's Process calls in flight by shard, and
	// the offers whose call ended since the stage's last peek began.
	inFlight map[int]int
	ended    map[string]bool
	// rotate is the held shard that the stage's next dispatch starts at
	// (only its dispatch loop uses it).
	rotate int
}

// NewRunner checks cfg and makes a Runner.
func NewRunner(cfg Config) (*Runner, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	r := &Runner{
		cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger,
		byID:        map[string]*stageRun{},
		changes:     newShardWants(),
		leases:      map[int]*held{},
		busy:        map[string]string{},
		deferred:    map[string]bool{},
		savePending: map[int][]*saveCall{},
		saveBusy:    map[int]bool{},
	}
	for _, sc := range cfg.Stages {
		if err := sc.fill(); err != nil {
			return nil, err
		}
		if _, dup := r.byID[sc.ID]; dup {
			return nil, fmt.Errorf("%w: stage id %q is given twice", ErrInvalid, sc.ID)
		}
		st := &stageRun{cfg: sc, sem: make(chan struct{}, sc.MaxParallel), wants: newShardWants(), afterWants: newShardWants(),
			inFlight: map[int]int{}, ended: map[string]bool{}}
		if sc.RateLimit > 0 {
			st.limiter = rate.NewLimiter(sc.RateLimit, sc.Burst)
		}
		st.after, _ = sc.Stage.(AfterSaver)
		r.stages = append(r.stages, st)
		r.byID[sc.ID] = st
	}
	r.m = newMetrics(cfg.Registerer, r)
	return r, nil
}

// Owner is the name this runner holds leases under.
func (r *Runner) Owner() string { return r.cfg.Owner }

// Shards lists the shards the runner holds now.
func (r *Runner) Shards() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, 0, len(r.leases))
	for s := range r.leases {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Run works until ctx ends, then releases its leases and returns nil (or
// the store's refusal of its first wake-up subscription).
func (r *Runner) Run(ctx context.Context) error {
	wakeups, err := r.store.Wakeups(ctx)
	if err != nil {
		return fmt.Errorf("scheduler: subscribe to the store's wake-ups: %w", err)
	}
	var wg sync.WaitGroup
	goLoop := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	goLoop(func(ctx context.Context) { r.wakeLoop(ctx, wakeups) })
	goLoop(r.leaseLoop)
	goLoop(r.changesLoop)
	for _, st := range r.stages {
		goLoop(func(ctx context.Context) { r.stageLoop(ctx, st) })
		if st.after != nil {
			goLoop(func(ctx context.Context) { r.afterSaveLoop(ctx, st) })
		}
	}
	if r.cfg.RescanEvery > 0 {
		goLoop(r.rescanLoop)
	}
	wg.Wait()
	r.releaseAll()
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// wakeAll wants every held shard in every loop.
func (r *Runner) wakeAll() {
	r.changes.add(-1)
	for _, st := range r.stages {
		st.wants.add(-1)
		st.afterWants.add(-1)
	}
}

// wakeStages wants shard in every stage's queue: an offer of it is free
// again, so its entries in the other stages may go.
func (r *Runner) wakeStages(shard int) {
	for _, st := range r.stages {
		st.wants.add(shard)
	}
}

func (r *Runner) wakeLoop(ctx context.Context, ch <-chan Wakeup) {
	for {
		select {
		case <-ctx.Done():
			return
		case w, ok := <-ch:
			if !ok {
				return
			}
			if w.Shard >= 0 && !r.holds(w.Shard) {
				continue
			}
			switch st := r.byID[w.Stage]; {
			case st != nil:
				st.wants.add(w.Shard)
				st.afterWants.add(w.Shard)
			case w.Stage == "" && w.Shard >= 0:
				r.changes.add(w.Shard)
			default:
				r.wakeAll()
			}
		}
	}
}

// wait blocks until ctx ends (false), a wake-up of w, the clock reaching
// next (when not zero), or the poll interval, which wants every shard.
func (r *Runner) wait(ctx context.Context, next time.Time, w *shardWants) bool {
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	var due <-chan time.Time
	if !next.IsZero() {
		due = r.clock.After(max(next.Sub(r.clock.Now()), 0))
	}
	select {
	case <-ctx.Done():
		return false
	case <-poll.C:
		w.putBack(-1)
	case <-due:
	case <-w.wake:
	}
	return true
}

// ---- shard leases ----

func (r *Runner) holds(shard int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.leases[shard]
	return ok
}

// lease returns the runner's lease of shard while it is fresh enough to
// write under: renewed within two thirds of the TTL.
func (r *Runner) lease(shard int) (Lease, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.leases[shard]
	if !ok || time.Since(h.renewed) > r.cfg.LeaseTTL*2/3 {
		return Lease{}, false
	}
	return h.Lease, true
}

func (r *Runner) held() []Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Lease, 0, len(r.leases))
	for _, h := range r.leases {
		out = append(out, h.Lease)
	}
	slices.SortFunc(out, func(a, b Lease) int { return a.Shard - b.Shard })
	return out
}

// drop forgets l (fenced: another runner holds its shard now).
func (r *Runner) drop(l Lease, why error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.leases[l.Shard]; ok && h.Epoch == l.Epoch {
		delete(r.leases, l.Shard)
		r.log.Info("scheduler: shard lease lost", "lease", l.String(), "err", why)
	}
}

func (r *Runner) leaseLoop(ctx context.Context) {
	for {
		r.keepLeases(ctx)
		t := time.NewTimer(r.cfg.LeaseTTL / 3)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// keepLeases renews the held leases, then claims up to this runner's share
// of the shards, or releases what it holds above it.
func (r *Runner) keepLeases(ctx context.Context) {
	for _, l := range r.held() {
		start := time.Now()
		err := r.store.Renew(ctx, l, r.cfg.LeaseTTL)
		switch {
		case err == nil:
			r.mu.Lock()
			if h, ok := r.leases[l.Shard]; ok && h.Epoch == l.Epoch {
				h.renewed = start
			}
			r.mu.Unlock()
		case errors.Is(err, ErrFenced):
			r.drop(l, err)
		default:
			r.warn(ctx, "scheduler: renew shard lease", "lease", l.String(), "err", err)
		}
	}
	if err := r.store.Announce(ctx, r.cfg.Owner, r.cfg.LeaseTTL); err != nil {
		r.warn(ctx, "scheduler: announce this runner", "err", err)
	}
	live, err := r.store.Runners(ctx)
	if err != nil {
		r.warn(ctx, "scheduler: list runners", "err", err)
		return
	}
	infos, err := r.store.Leases(ctx)
	if err != nil {
		r.warn(ctx, "scheduler: list shard leases", "err", err)
		return
	}
	owners := map[string]bool{r.cfg.Owner: true}
	for _, o := range live {
		owners[o] = true
	}
	var free []int
	for _, in := range infos {
		if in.Expired {
			free = append(free, in.Shard)
			continue
		}
		owners[in.Owner] = true
	}
	r.shareRates(len(owners))
	shards := r.store.Shards()
	share := (shards + len(owners) - 1) / len(owners)
	if r.cfg.MaxShards > 0 {
		share = min(share, r.cfg.MaxShards)
	}
	mine := r.held()
	switch {
	case len(mine) < share && len(free) > 0:
		want := free[:min(len(free), share-len(mine))]
		start := time.Now()
		got, err := r.store.Claim(ctx, r.cfg.Owner, want, r.cfg.LeaseTTL)
		if err != nil {
			r.warn(ctx, "scheduler: claim shards", "shards", want, "err", err)
			return
		}
		r.mu.Lock()
		for _, l := range got {
			r.leases[l.Shard] = &held{Lease: l, renewed: start}
		}
		r.mu.Unlock()
		if len(got) > 0 {
			r.log.Info("scheduler: claimed shards", "owner", r.cfg.Owner, "count", len(got))
			r.wakeAll()
		}
	case len(mine) > share:
		for _, l := range mine[share:] {
			r.drop(l, errors.New("above this runner's share"))
			if err := r.store.Release(ctx, l); err != nil {
				r.log.Warn("scheduler: release shard", "lease", l.String(), "err", err)
			}
		}
	}
}

// shareRates sets each stage's limits in this runner to its share of the
// stage's: StageConfig.RateLimit and MaxParallel are the stage's over all
// runners, so each of n live runners takes RateLimit / n and MaxParallel
// / n calls at a time (at least one).
func (r *Runner) shareRates(n int) {
	n = max(n, 1)
	for _, st := range r.stages {
		if st.limiter != nil {
			st.limiter.SetLimit(st.cfg.RateLimit / rate.Limit(n))
		}
		st.allowed.Store(int32(max(st.cfg.MaxParallel/n, 1))) //nolint:gosec // bounded by MaxParallel
	}
}

// slots is how many Process calls of the stage this runner may have at
// once: its share of MaxParallel (sem's capacity until the first share).
func (st *stageRun) slots() int {
	if a := int(st.allowed.Load()); a > 0 {
		return min(a, cap(st.sem))
	}
	return cap(st.sem)
}

// warn logs a failure unless the runner is stopping (ctx ended), when
// the store's calls fail for that reason.
func (r *Runner) warn(ctx context.Context, msg string, args ...any) {
	if ctx.Err() == nil {
		r.log.Warn(msg, args...)
	}
}

// releaseStopTimeout bounds the releases of a stopping runner.
const releaseStopTimeout = 5 * time.Second

func (r *Runner) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), releaseStopTimeout)
	defer cancel()
	for _, l := range r.held() {
		r.drop(l, errors.New("runner stopped"))
		if err := r.store.Release(ctx, l); err != nil && !errors.Is(err, ErrFenced) {
			r.log.Warn("scheduler: release shard", "lease", l.String(), "err", err)
		}
	}
}
