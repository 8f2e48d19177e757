package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// ---- step 1: a stage's queue ----

func (r *Runner) stageLoop(ctx context.Context, st *stageRun) {
	for {
		next := r.dispatch(ctx, st)
		if !r.wait(ctx, next, st.wants) || !r.gather(ctx, st) {
			// Wait for the stage's calls in flight: Run returns after them.
			for range cap(st.sem) {
				st.sem <- struct{}{}
			}
			return
		}
	}
}

// gather waits, while more than three quarters of the stage's slots are
// busy, up to gatherWait for calls to end: under load a dispatch then
// fills many slots with a few peeks, instead of peeking shard after shard
// for each slot that freed. It returns false when ctx ended.
func (r *Runner) gather(ctx context.Context, st *stageRun) bool {
	t := time.NewTimer(gatherWait)
	defer t.Stop()
	for len(st.sem) > st.slots()*3/4 {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-st.wants.wake:
		}
	}
	return true
}

// dispatch starts Process calls for the stage's due entries in the held
// shards it wants (st.wants: woken, polled, or with an entry come due)
// while it has free slots, and returns when the earliest later entry of
// a held shard is due (zero if none). It peeks peekParallel shards at a
// time, starting one shard further each call so that no shard waits
// behind the others when the slots are few; a shard it did not peek, or
// whose due entries did not all find a slot, stays wanted.
func (r *Runner) dispatch(ctx context.Context, st *stageRun) time.Time {
	all := r.held()
	if len(all) == 0 {
		return time.Time{}
	}
	// Entries due within timerLead are taken now and wait for their time
	// in process: a timer's lateness is then not the length of a round of
	// peeks.
	held := st.wants.take(all, r.clock.Now().Add(timerLead))
	if len(held) > 0 {
		st.rotate = (st.rotate + 1) % len(held)
		held = append(held[st.rotate:], held[:st.rotate]...)
	}
	// Entries of offers in flight here stay in the queue and come back in
	// the peek: read past them. Shards with none in flight are peeked
	// first, so that a peek reads new entries rather than those in flight
	// again, and a shard's entries go in batches (their saves then go
	// together too). A Process call that ends after the peeks began may
	// have removed or moved its entry: such entries are left to the next
	// peek (ended; the call's end wants its shard again), so an entry
	// taken is still in the queue and due, and needs no reading again.
	r.mu.Lock()
	clear(st.ended)
	slices.SortStableFunc(held, func(a, b Lease) int {
		return min(st.inFlight[a.Shard], 1) - min(st.inFlight[b.Shard], 1)
	})
	r.mu.Unlock()
	type peeked struct {
		entries []Entry
		later   time.Time
		err     error
	}
	for from := 0; from < len(held); {
		free := max(st.slots()-len(st.sem), 0)
		if free == 0 || ctx.Err() != nil {
			for _, l := range held[from:] {
				st.wants.putBack(l.Shard)
			}
			break
		}
		// As many shards side by side as the free slots may want: one
		// shard for a few slots, up to peekParallel.
		n := min(max(free/8, 1), peekParallel)
		group := held[from:min(from+n, len(held))]
		from += len(group)
		got := make([]peeked, len(group))
		limits := make([]int, len(group))
		now := r.clock.Now().Add(timerLead)
		var wg sync.WaitGroup
		for i, l := range group {
			r.mu.Lock()
			limits[i] = (free+len(group)-1)/len(group) + st.inFlight[l.Shard] + peekSlack
			r.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i].entries, got[i].later, got[i].err = r.store.Peek(ctx, l, st.cfg.ID, now, limits[i])
			}()
		}
		wg.Wait()
		for i, l := range group {
			if err := got[i].err; err != nil {
				if errors.Is(err, ErrFenced) {
					r.drop(l, err)
				} else if ctx.Err() == nil {
					st.wants.setDue(l.Shard, r.clock.Now().Add(r.cfg.RetryInitial))
					r.log.Warn("scheduler: peek", "stage", st.cfg.ID, "shard", l.Shard, "err", err)
				}
				continue
			}
			st.wants.setDue(l.Shard, got[i].later)
			if len(got[i].entries) >= limits[i] {
				st.wants.putBack(l.Shard) // more may be due than the peek read
			}
			for _, e := range got[i].entries {
				if len(st.sem) >= st.slots() {
					st.wants.putBack(l.Shard) // due entries left for want of a slot
					break
				}
				if !r.take(st, e) {
					continue
				}
				st.sem <- struct{}{}
				go func() {
					defer func() {
						r.untake(st, e)
						<-st.sem
						// The entries of this offer in other stages may wait for it.
						r.wakeStages(e.Shard)
					}()
					r.process(ctx, st, l, e)
				}()
			}
		}
	}
	return st.wants.earliest(all)
}

// peekParallel is how many shards one dispatch peeks at once at most;
// timerLead is how long before its due time an entry is taken (holding a
// slot and its offer until then); gatherWait bounds gather.
const (
	peekParallel = 16
	timerLead    = 100 * time.Millisecond
	gatherWait   = 5 * time.Millisecond
)

// peekSlack is how many entries a peek reads beyond its share of the free
// slots and the shard's entries in flight: for entries of offers busy in
// other stages.
const peekSlack = 8

// take marks an offer busy in a stage: one stage at a time on an offer
// (S11, S22). A runner holds the offer's shard alone (the lease fences any
// other), so a mark in its memory is enough. An entry whose offer's
// Process call in this stage ended since the peek is not taken.
func (r *Runner) take(st *stageRun, e Entry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, busy := r.busy[e.OfferID]; busy || st.ended[e.OfferID] {
		return false
	}
	r.busy[e.OfferID] = st.cfg.ID
	st.inFlight[e.Shard]++
	return true
}

func (r *Runner) untake(st *stageRun, e Entry) {
	r.mu.Lock()
	delete(r.busy, e.OfferID)
	st.ended[e.OfferID] = true
	if st.inFlight[e.Shard]--; st.inFlight[e.Shard] <= 0 {
		delete(st.inFlight, e.Shard)
	}
	deferred := r.deferred[e.OfferID]
	delete(r.deferred, e.OfferID)
	r.mu.Unlock()
	if deferred {
		r.changes.add(e.Shard)
	}
}

// ---- steps 2–6: one entry ----

func (r *Runner) process(ctx context.Context, st *stageRun, l Lease, e Entry) {
	if wait := e.Due.Sub(r.clock.Now()); wait > 0 {
		select {
		case <-r.clock.After(wait):
		case <-ctx.Done():
			return
		}
	}
	if st.limiter != nil {
		if err := st.limiter.Wait(ctx); err != nil {
			return
		}
	}
	for conflicts := 0; ; conflicts++ {
		if _, ok := r.lease(l.Shard); !ok {
			return // the lease went stale while waiting: the next holder does it
		}
		// Step 2.
		offer, state, err := r.store.Load(ctx, e.OfferID, st.cfg.ID)
		if err != nil {
			r.fail(ctx, st, l, e, fmt.Errorf("load: %w", err))
			return
		}
		if offer.Version == 0 { // deleted: nothing to do
			if err := r.store.Delete(ctx, l, st.cfg.ID, e.OfferID); err != nil && ctx.Err() == nil {
				r.log.Warn("scheduler: delete entry of a missing offer", "stage", st.cfg.ID, "offer", e.OfferID, "err", err)
			}
			return
		}
		// Step 3.
		res, err := r.callProcess(ctx, st, offer, state)
		if err == nil {
			err = st.cfg.checkResult(res)
		}
		if err != nil {
			// Step 4.
			r.fail(ctx, st, l, e, err)
			return
		}
		// Step 5.
		s := Save{
			OfferID: e.OfferID, Stage: st.cfg.ID, ReadVersion: offer.Version,
			Patch: res.Patch, State: res.State, StateVersion: state.Version,
			Timer: res.Timer, AfterSave: st.after != nil,
		}
		if res.Body != nil {
			fields, err := ChangedFields(offer.Body, res.Body)
			if err != nil {
				r.fail(ctx, st, l, e, err)
				return
			}
			if len(fields) > 0 { // an unchanged body triggers nothing (S11)
				s.Body, s.Fields = res.Body, fields
			}
		}
		if res.Patch != nil {
			s.Fields = res.Patch.Fields()
		}
		s.Chain = offer.Chain + 1
		if e.Timer || e.Lane == LaneRescan {
			s.Chain = 1 // a timer or a rescan starts a new chain
		}
		saved, err := r.save(ctx, l, s)
		switch {
		case errors.Is(err, ErrConflict):
			// Step 6: run again on what is there now.
			r.m.conflicts.WithLabelValues(st.cfg.ID).Inc()
			if conflicts+1 >= r.cfg.MaxConflicts {
				r.fail(ctx, st, l, e, fmt.Errorf("%d conflicting saves in a row: %w", conflicts+1, err))
				return
			}
			continue
		case errors.Is(err, ErrFenced):
			r.drop(l, err)
			return
		case err != nil:
			if ctx.Err() == nil {
				r.fail(ctx, st, l, e, fmt.Errorf("save: %w", err))
			}
			return
		}
		r.m.processed.WithLabelValues(st.cfg.ID).Inc()
		if saved.Changed {
			r.changes.add(l.Shard)
		}
		if s.AfterSave {
			st.afterWants.add(l.Shard)
		}
		if !res.Timer.IsZero() {
			st.wants.add(l.Shard)
		}
		return
	}
}

// ---- step 5: saves, gathered per shard ----

// saveCall is one Process call's save, waiting for its SaveMany.
type saveCall struct {
	l     Lease
	s     Save
	saved Saved
	err   error
	done  chan struct{}
}

// save writes s through the shard's saver: the saves of a shard's
// concurrent Process calls that come while one SaveMany is in flight go
// together in the next, so a busy shard takes one store write for many
// saves, and a lone save waits for nothing.
func (r *Runner) save(ctx context.Context, l Lease, s Save) (Saved, error) {
	c := &saveCall{l: l, s: s, done: make(chan struct{})}
	r.saveMu.Lock()
	r.savePending[l.Shard] = append(r.savePending[l.Shard], c)
	start := !r.saveBusy[l.Shard]
	r.saveBusy[l.Shard] = true
	r.saveMu.Unlock()
	if start {
		go r.flushSaves(ctx, l.Shard)
	}
	<-c.done
	return c.saved, c.err
}

// flushSaves writes the shard's pending saves, BatchSize at a time and one
// lease at a time, until none is left.
func (r *Runner) flushSaves(ctx context.Context, shard int) {
	for {
		r.saveMu.Lock()
		calls := r.savePending[shard]
		if len(calls) == 0 {
			delete(r.saveBusy, shard)
			delete(r.savePending, shard)
			r.saveMu.Unlock()
			return
		}
		l := calls[0].l
		var batch, rest []*saveCall
		for _, c := range calls {
			if c.l == l && len(batch) < r.cfg.BatchSize {
				batch = append(batch, c)
			} else {
				rest = append(rest, c)
			}
		}
		r.savePending[shard] = rest
		r.saveMu.Unlock()
		saves := make([]Save, len(batch))
		for i, c := range batch {
			saves[i] = c.s
		}
		saved, errs, err := r.store.SaveMany(ctx, l, saves)
		for i, c := range batch {
			if err != nil {
				c.err = err
			} else {
				c.saved, c.err = saved[i], errs[i]
			}
			close(c.done)
		}
	}
}

// errPanic wraps a stage's panic.
var errPanic = errors.New("panic")

// call runs f with the stage's timeout, turning a panic into an error and
// a call that outlived its timeout into one.
func call[T any](ctx context.Context, st *stageRun, what string, f func(context.Context) (T, error)) (out T, err error) {
	cctx, cancel := context.WithTimeout(ctx, st.cfg.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("stage %q: %s: %w: %v\n%s", st.cfg.ID, what, errPanic, p, debug.Stack())
		}
	}()
	out, err = f(cctx)
	if err == nil && cctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("stage %q: %s: timed out after %v: %w", st.cfg.ID, what, st.cfg.Timeout, cctx.Err())
	}
	if err != nil && !errors.Is(err, errPanic) {
		err = fmt.Errorf("stage %q: %s: %w", st.cfg.ID, what, err)
	}
	return out, err
}

func (r *Runner) callProcess(ctx context.Context, st *stageRun, o Offer, s State) (Result, error) {
	return call(ctx, st, "Process", func(ctx context.Context) (Result, error) { return st.cfg.Stage.Process(ctx, o, s) })
}

// backoff is the wait after the attempts-th failure.
func (r *Runner) backoff(attempts int) time.Duration {
	d := r.cfg.RetryInitial
	for i := 1; i < attempts && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.RetryMax)
}

// fail records a failed Process of e: it is due again after a backoff, or
// after MaxAttempts failures goes to the stage's dead letters (step 4).
func (r *Runner) fail(ctx context.Context, st *stageRun, l Lease, e Entry, cause error) {
	if ctx.Err() != nil {
		return // stopping: the entry stays as it was
	}
	r.m.retries.WithLabelValues(st.cfg.ID).Inc()
	r.log.Warn("scheduler: process failed", "stage", st.cfg.ID, "offer", e.OfferID, "attempt", e.Attempts+1, "err", cause)
	n, err := r.store.Retry(ctx, l, st.cfg.ID, e.OfferID, r.clock.Now().Add(r.backoff(e.Attempts+1)), cause.Error())
	if err != nil {
		if errors.Is(err, ErrFenced) {
			r.drop(l, err)
		} else if !errors.Is(err, ErrNotFound) {
			r.log.Warn("scheduler: record a failed attempt", "stage", st.cfg.ID, "offer", e.OfferID, "err", err)
		}
		return
	}
	if n < st.cfg.MaxAttempts {
		return
	}
	if err := r.store.DeadLetter(ctx, l, st.cfg.ID, e.OfferID, cause.Error()); err != nil {
		if errors.Is(err, ErrFenced) {
			r.drop(l, err)
		}
		r.log.Warn("scheduler: dead-letter", "stage", st.cfg.ID, "offer", e.OfferID, "err", err)
		return
	}
	r.m.dead.WithLabelValues(st.cfg.ID).Inc()
	r.log.Warn("scheduler: offer moved to dead letters", "stage", st.cfg.ID, "offer", e.OfferID, "attempts", n)
}

// ---- step 7: changed offers ----

func (r *Runner) changesLoop(ctx context.Context) {
	for {
		held := r.held()
		r.eachLease(ctx, r.changes.take(held, r.clock.Now()), r.passOnChanges)
		if !r.wait(ctx, r.changes.earliest(held), r.changes) {
			return
		}
	}
}

// changesParallel is how many shards' marks are passed on at once, and
// passOnParallel how many marks of one shard are asked about at once.
const (
	changesParallel = 8
	passOnParallel  = 32
)

// eachLease runs f for every lease of ls, changesParallel at once, and
// returns when all have returned.
func (r *Runner) eachLease(ctx context.Context, ls []Lease, f func(context.Context, Lease)) {
	var g errgroup.Group
	g.SetLimit(changesParallel)
	for _, l := range ls {
		g.Go(func() error {
			f(ctx, l)
			return nil
		})
	}
	_ = g.Wait() // f returns nothing to wait for
}

// passOnChanges passes on the marks of l's shard, a batch at a time: the
// stages are asked about each mark, then the batch's entries are offered
// in one OfferMany and its marks removed in one AckChanges.
func (r *Runner) passOnChanges(ctx context.Context, l Lease) {
	for ctx.Err() == nil {
		cs, err := r.store.Changes(ctx, l, r.cfg.BatchSize)
		if err != nil {
			r.storeFailed(ctx, l, "read changed offers", err)
			return
		}
		if !r.passOnBatch(ctx, l, cs) {
			return
		}
	}
}

// passOnBatch passes on one batch of l's marks and says whether to read
// more. Each offer is held busy from its ask until its mark is acked, so
// that no stage processes it in between: the stages' answers are about
// the offer as read, and an entry offered after a stage's save on a
// stale answer would run the stage again. The mark of an offer a stage
// is processing now is left for when that call ends.
func (r *Runner) passOnBatch(ctx context.Context, l Lease, cs []Change) bool {
	all := len(cs)
	held, cs := r.holdChanged(cs)
	defer r.releaseChanged(l.Shard, held)
	// The marks are asked about side by side (their reads go together
	// to the store); those that failed stay for the next round.
	asked := make([][]Entry, len(cs))
	errs := make([]error, len(cs))
	var g errgroup.Group
	g.SetLimit(passOnParallel)
	for i, c := range cs {
		g.Go(func() error {
			asked[i], errs[i] = r.passOn(ctx, l, c)
			return nil
		})
	}
	_ = g.Wait() // each mark's error is its own, in errs
	var entries []Entry
	var acks []Change
	for i, c := range cs {
		if errs[i] != nil {
			r.storeFailed(ctx, l, "pass on a changed offer "+c.OfferID, errs[i])
			continue
		}
		entries, acks = append(entries, asked[i]...), append(acks, c)
	}
	if len(entries) > 0 {
		queued, err := r.store.OfferMany(ctx, l, entries)
		if err != nil {
			r.storeFailed(ctx, l, "queue changed offers", err)
			return false
		}
		for i, ok := range queued {
			if ok {
				r.byID[entries[i].Stage].wants.add(l.Shard)
			}
		}
	}
	if len(acks) > 0 {
		if err := r.store.AckChanges(ctx, l, acks); err != nil {
			r.storeFailed(ctx, l, "ack changed offers", err)
			return false
		}
	}
	return len(acks) == all && all >= r.cfg.BatchSize
}

// holdChanged marks busy the offers of cs that no stage is processing,
// and returns them and their changes; the others are deferred to the end
// of their stage's call.
func (r *Runner) holdChanged(cs []Change) ([]string, []Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	var free []Change
	for _, c := range cs {
		if _, busy := r.busy[c.OfferID]; busy {
			r.deferred[c.OfferID] = true
			continue
		}
		r.busy[c.OfferID] = changesBusy
		ids = append(ids, c.OfferID)
		free = append(free, c)
	}
	return ids, free
}

// releaseChanged frees the offers holdChanged held, and wants their
// shard in every stage (their entries were left alone while held).
func (r *Runner) releaseChanged(shard int, ids []string) {
	if len(ids) == 0 {
		return
	}
	r.mu.Lock()
	for _, id := range ids {
		if r.busy[id] == changesBusy {
			delete(r.busy, id)
		}
	}
	r.mu.Unlock()
	r.wakeStages(shard)
}

// changesBusy is the busy mark of an offer whose change is being passed
// on (no stage id is empty).
const changesBusy = ""

// storeFailed lets l go when the store fenced it; other failures of the
// changed-offer pass are logged (unless the runner is stopping), and the
// shard's marks read again RetryInitial later.
func (r *Runner) storeFailed(ctx context.Context, l Lease, what string, err error) {
	if errors.Is(err, ErrFenced) {
		r.drop(l, err)
	} else if ctx.Err() == nil {
		r.changes.setDue(l.Shard, r.clock.Now().Add(r.cfg.RetryInitial))
		r.log.Warn("scheduler: "+what, "shard", l.Shard, "err", err)
	}
}

// passOn asks the stages about one changed offer and returns the entries
// to offer for it; the caller removes the mark after offering them.
func (r *Runner) passOn(ctx context.Context, l Lease, c Change) ([]Entry, error) {
	if c.Chain > r.cfg.MaxChain {
		r.m.loopGuard.WithLabelValues(c.Source).Inc()
		r.log.Warn("scheduler: loop guard: a change not passed on", "offer", c.OfferID, "stage", c.Source, "chain", c.Chain, "max_chain", r.cfg.MaxChain)
		return nil, nil
	}
	queued, err := r.store.Check(ctx, l.Shard, c.OfferID)
	if err != nil {
		return nil, err
	}
	now := r.clock.Now()
	var out []Entry
	for _, st := range r.stages {
		if st.cfg.ID == c.Source || !st.cfg.interested(c.Fields) {
			continue
		}
		if i := indexOfStage(queued, st.cfg.ID); i >= 0 && !queued[i].Due.After(now) && queued[i].Lane == LaneMain {
			continue // already due in its queue (S12)
		}
		e, want, err := r.decide(ctx, st, l, c.OfferID, LaneMain, now)
		if err != nil {
			return nil, err
		}
		if want {
			out = append(out, e)
		}
	}
	return out, nil
}

func indexOfStage(es []Entry, stage string) int {
	for i, e := range es {
		if e.Stage == stage {
			return i
		}
	}
	return -1
}

// ask calls a stage's ShouldProcess on an offer and offers it to the
// stage's queue as it answers.
func (r *Runner) ask(ctx context.Context, st *stageRun, l Lease, id string, lane Lane, now time.Time) error {
	e, want, err := r.decide(ctx, st, l, id, lane, now)
	if err != nil || !want {
		return err
	}
	ok, err := r.store.Offer(ctx, l, e)
	if err != nil {
		return err
	}
	if ok {
		st.wants.add(l.Shard)
	}
	return nil
}

// decide calls a stage's ShouldProcess on an offer and returns the entry
// it asks for, if it wants the offer; an error wants it now (S15).
func (r *Runner) decide(ctx context.Context, st *stageRun, l Lease, id string, lane Lane, now time.Time) (Entry, bool, error) {
	offer, state, err := r.store.Load(ctx, id, st.cfg.ID)
	if err != nil {
		return Entry{}, false, err
	}
	if offer.Version == 0 {
		return Entry{}, false, nil
	}
	r.m.asked.WithLabelValues(st.cfg.ID).Inc()
	d, err := call(ctx, st, "ShouldProcess", func(ctx context.Context) (Decision, error) {
		return st.cfg.Stage.ShouldProcess(ctx, offer, state)
	})
	if err != nil {
		if ctx.Err() != nil {
			return Entry{}, false, ctx.Err()
		}
		r.log.Warn("scheduler: ShouldProcess failed; the offer is queued anyway", "stage", st.cfg.ID, "offer", id, "err", err)
		d = Now()
	}
	e := Entry{Shard: l.Shard, Stage: st.cfg.ID, OfferID: id, Due: now, Lane: lane}
	switch d.kind {
	case decideSkip:
		return Entry{}, false, nil
	case decideAt:
		e.Due, e.Timer = d.at, true
	}
	return e, true, nil
}

// ---- step 8: AfterSave ----

func (r *Runner) afterSaveLoop(ctx context.Context, st *stageRun) {
	for {
		held := r.held()
		for _, l := range st.afterWants.take(held, r.clock.Now()) {
			r.afterSaves(ctx, st, l)
		}
		if !r.wait(ctx, st.afterWants.earliest(held), st.afterWants) {
			return
		}
	}
}

// afterSaves calls the hook for the shard's pending saves (a batch of
// them; a full batch wants the shard again at once). A failed call stays
// pending, and the shard is read again RetryInitial later.
func (r *Runner) afterSaves(ctx context.Context, st *stageRun, l Lease) {
	again := func() { st.afterWants.setDue(l.Shard, r.clock.Now().Add(r.cfg.RetryInitial)) }
	ps, err := r.store.AfterSaves(ctx, l, st.cfg.ID, r.cfg.BatchSize)
	if err != nil {
		if errors.Is(err, ErrFenced) {
			r.drop(l, err)
		} else if ctx.Err() == nil {
			again()
			r.log.Warn("scheduler: read pending AfterSave calls", "stage", st.cfg.ID, "err", err)
		}
		return
	}
	failed := false
	for _, p := range ps {
		offer, state, err := r.store.Load(ctx, p.OfferID, st.cfg.ID)
		if err != nil {
			again()
			return
		}
		if offer.Version != 0 {
			if _, err := call(ctx, st, "AfterSave", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, st.after.AfterSave(ctx, offer, state)
			}); err != nil {
				if ctx.Err() == nil {
					r.m.retries.WithLabelValues(st.cfg.ID).Inc()
					r.log.Warn("scheduler: AfterSave failed; retried later", "stage", st.cfg.ID, "offer", p.OfferID, "err", err)
				}
				failed = true
				continue
			}
		}
		if err := r.store.AfterSaveDone(ctx, l, p); err != nil {
			if errors.Is(err, ErrFenced) {
				r.drop(l, err)
			} else {
				again()
			}
			return
		}
	}
	switch {
	case failed:
		again()
	case len(ps) >= r.cfg.BatchSize:
		st.afterWants.add(l.Shard)
	}
}

// ---- the background rescan (S13) ----

func (r *Runner) rescanLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.clock.After(r.cfg.RescanEvery):
		}
		for _, l := range r.held() {
			r.rescan(ctx, l)
		}
	}
}

// rescan asks every stage about every offer of l's shard that its queue
// does not hold, and offers those it wants to its rescan lane.
func (r *Runner) rescan(ctx context.Context, l Lease) {
	after := ""
	for ctx.Err() == nil {
		ids, err := r.store.Scan(ctx, l.Shard, after, r.cfg.BatchSize)
		if err != nil {
			r.log.Warn("scheduler: rescan", "shard", l.Shard, "err", err)
			return
		}
		for _, id := range ids {
			queued, err := r.store.Check(ctx, l.Shard, id)
			if err != nil {
				return
			}
			for _, st := range r.stages {
				if indexOfStage(queued, st.cfg.ID) >= 0 {
					continue
				}
				if err := r.ask(ctx, st, l, id, LaneRescan, r.clock.Now()); err != nil {
					if errors.Is(err, ErrFenced) {
						r.drop(l, err)
					}
					return
				}
			}
		}
		if len(ids) < r.cfg.BatchSize {
			return
		}
		after = ids[len(ids)-1]
	}
}
