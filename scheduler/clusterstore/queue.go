package clusterstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/tuple"
)

// maxCause bounds a stored error message.
const maxCause = 4096

// truncate cuts s to at most n bytes, not inside a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

func lane(l scheduler.Lane) tuple.Value { return tuple.Uint(uint64(l)) }

// entryOf reads a <p>_queue_inverted tuple.
func entryOf(t tuple.Tuple) scheduler.Entry {
	return scheduler.Entry{
		Shard: int(uintAt(t, 0)), OfferID: strAt(t, 1), Stage: strAt(t, 2), //nolint:gosec // shards are small
		Lane: scheduler.Lane(uintAt(t, 3)), Due: time.UnixMicro(intAt(t, 4)), //nolint:gosec // 0 or 1
		Timer: boolAt(t, 5), Attempts: int(uintAt(t, 6)), LastError: strAt(t, 7), //nolint:gosec // bounded by MaxInt32
	}
}

// queueEntryOf reads a <p>_queue tuple: its key, then the entry's timer,
// attempts and last error (as in queue_inverted: both rows are written
// together).
func queueEntryOf(t tuple.Tuple) scheduler.Entry {
	return scheduler.Entry{
		Shard: int(uintAt(t, 0)), Stage: strAt(t, 1), Lane: scheduler.Lane(uintAt(t, 2)), Due: time.UnixMicro(intAt(t, 3)), //nolint:gosec // small
		OfferID: strAt(t, 4), Timer: boolAt(t, 5), Attempts: int(uintAt(t, 6)), LastError: strAt(t, 7), //nolint:gosec // bounded by MaxInt32
	}
}

func queueKey(e scheduler.Entry) []tuple.Value {
	return []tuple.Value{shardKey(e.Shard), tuple.String(e.Stage), lane(e.Lane), micros(e.Due), tuple.String(e.OfferID)}
}

// insertEntry adds to b the writes of e into its lane and queue_inverted
// (the caller checked that the offer is not in the stage's queue, or
// deleted its entry earlier in b).
func (st *Store) insertEntry(b *client.Batch, e scheduler.Entry) {
	b.Replace(st.sp.inverted, tuple.Tuple{shardKey(e.Shard), tuple.String(e.OfferID), tuple.String(e.Stage), lane(e.Lane), micros(e.Due),
		tuple.Bool(e.Timer), u64(int64(e.Attempts)), tuple.String(e.LastError)})
	b.Replace(st.sp.queue, append(tuple.Tuple(queueKey(e)), tuple.Bool(e.Timer), u64(int64(e.Attempts)), tuple.String(e.LastError)))
}

// deleteEntry adds to b the deletes of e's rows.
func (st *Store) deleteEntry(b *client.Batch, e scheduler.Entry) {
	b.Delete(st.sp.inverted, stateKey(e.Shard, e.OfferID, e.Stage))
	b.Delete(st.sp.queue, queueKey(e))
}

// entry reads a stage's entry of an offer.
func (st *Store) entry(ctx context.Context, sh int, stage, id string) (client.Result, error) {
	return st.get(ctx, st.sp.inverted, stateKey(sh, id, stage)...)
}

// Offer implements scheduler.Store.
func (st *Store) Offer(ctx context.Context, l scheduler.Lease, e scheduler.Entry) (bool, error) {
	if err := st.checkEntry(l, e.Stage, e.OfferID); err != nil {
		return false, err
	}
	if e.Lane != scheduler.LaneMain && e.Lane != scheduler.LaneRescan {
		return false, fmt.Errorf("%w: lane %d", scheduler.ErrInvalid, e.Lane)
	}
	e.Shard = l.Shard
	queued := false
	err := retry("offer "+e.OfferID+" to stage "+e.Stage, func() error {
		queued = false
		inv, err := st.entry(ctx, l.Shard, e.Stage, e.OfferID)
		if err != nil {
			return err
		}
		n := e
		b := st.fenced(l).Check(st.sp.inverted, stateKey(l.Shard, e.OfferID, e.Stage), client.VersionIs(inv.Version))
		if inv.Found {
			old := entryOf(inv.Tuple)
			earlier := n.Due.Before(old.Due)
			promote := n.Lane == scheduler.LaneMain && old.Lane == scheduler.LaneRescan
			if !earlier && !promote {
				// Nothing changes, but a stale lease is still told so.
				return st.do(ctx, "offer", b, &l)
			}
			if !earlier {
				n.Due = old.Due
			}
			if old.Lane == scheduler.LaneMain {
				n.Lane = scheduler.LaneMain
			}
			n.Attempts, n.LastError = old.Attempts, old.LastError
			st.deleteEntry(b, old)
		}
		st.insertEntry(b, n)
		if err := st.do(ctx, "offer", b, &l); err != nil {
			return err
		}
		queued = true
		return nil
	})
	return queued, err
}

// rangeAll reads every tuple of space in sh's bucket within o's bounds
// (o.Limit: at most that many; 0: all), a page at a time.
func (st *Store) rangeAll(ctx context.Context, space string, sh int, o client.RangeOptions) ([]client.Versioned, error) {
	bk, err := st.bucket(ctx, sh)
	if err != nil {
		return nil, err
	}
	want := o.Limit
	o.Bucket = bk
	var out []client.Versioned
	for {
		o.Limit = 1000
		if want > 0 {
			o.Limit = min(want-len(out), 1000)
		}
		page, more, err := st.c.Space(space).Range(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("clusterstore: read %s of shard %d: %w", space, sh, err)
		}
		out = append(out, page...)
		if !more || len(page) == 0 || (want > 0 && len(out) >= want) {
			return out, nil
		}
		o.From, o.After = nil, page[len(page)-1].Tuple[:st.keyLen[space]]
	}
}

// Peek implements scheduler.Store.
func (st *Store) Peek(ctx context.Context, l scheduler.Lease, stage string, now time.Time, limit int) ([]scheduler.Entry, time.Time, error) {
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return nil, time.Time{}, err
	}
	if limit <= 0 {
		return nil, time.Time{}, fmt.Errorf("%w: peek limit %d must be positive", scheduler.ErrInvalid, limit)
	}
	lanes := []scheduler.Lane{scheduler.LaneMain, scheduler.LaneRescan}
	var (
		due   [2][]client.Versioned
		later [2][]client.Versioned
		errs  [4]error
		wg    sync.WaitGroup
	)
	for j, ln := range lanes {
		prefix := []tuple.Value{shardKey(l.Shard), tuple.String(stage), lane(ln)}
		wg.Go(func() {
			due[j], errs[2*j] = st.rangeAll(ctx, st.sp.queue, l.Shard, client.RangeOptions{Prefix: prefix,
				Until: append(slices.Clone(prefix), tuple.Int(now.UnixMicro()+1)), Limit: limit})
		})
		wg.Go(func() {
			later[j], errs[2*j+1] = st.rangeAll(ctx, st.sp.queue, l.Shard, client.RangeOptions{Prefix: prefix,
				From: append(slices.Clone(prefix), tuple.Int(now.UnixMicro()+1)), Limit: 1})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, time.Time{}, err
		}
	}
	var out []scheduler.Entry
	for _, rows := range due {
		for _, r := range rows {
			if len(out) < limit {
				out = append(out, queueEntryOf(r.Tuple))
			}
		}
	}
	var next time.Time
	for _, rows := range later {
		if len(rows) > 0 {
			if at := time.UnixMicro(intAt(rows[0].Tuple, 3)); next.IsZero() || at.Before(next) {
				next = at
			}
		}
	}
	return out, next, nil
}

// Delete implements scheduler.Store.
func (st *Store) Delete(ctx context.Context, l scheduler.Lease, stage, id string) error {
	if err := st.checkEntry(l, stage, id); err != nil {
		return err
	}
	return retry("delete "+id+" from stage "+stage, func() error {
		inv, err := st.entry(ctx, l.Shard, stage, id)
		if err != nil {
			return err
		}
		b := st.fenced(l).Check(st.sp.inverted, stateKey(l.Shard, id, stage), client.VersionIs(inv.Version))
		if inv.Found {
			st.deleteEntry(b, entryOf(inv.Tuple))
		}
		return st.do(ctx, "delete", b, &l)
	})
}

// Check implements scheduler.Store.
func (st *Store) Check(ctx context.Context, shard int, id string) ([]scheduler.Entry, error) {
	if err := scheduler.ValidateID("offer", id); err != nil {
		return nil, err
	}
	if shard < 0 || shard >= st.shards {
		return nil, fmt.Errorf("%w: shard %d: the store has shards 0..%d", scheduler.ErrInvalid, shard, st.shards-1)
	}
	rows, err := st.rangeAll(ctx, st.sp.inverted, shard, client.RangeOptions{Prefix: offerKey(shard, id)})
	if err != nil {
		return nil, err
	}
	out := make([]scheduler.Entry, len(rows))
	for j, r := range rows {
		out[j] = entryOf(r.Tuple)
	}
	return out, nil
}

// takeHeld reads an offer's entry of a stage for a write of l's holder:
// ErrNotFound when the offer is not in the stage's queue (and l's fence
// still holds).
func (st *Store) takeHeld(ctx context.Context, l scheduler.Lease, stage, id string) (client.Result, error) {
	inv, err := st.entry(ctx, l.Shard, stage, id)
	if err != nil {
		return inv, err
	}
	if !inv.Found {
		if err := st.do(ctx, "check the shard lease", st.fenced(l), &l); err != nil {
			return inv, err
		}
		return inv, fmt.Errorf("%w: offer %q is not in stage %q's queue", scheduler.ErrNotFound, id, stage)
	}
	return inv, nil
}

// Retry implements scheduler.Store.
func (st *Store) Retry(ctx context.Context, l scheduler.Lease, stage, id string, at time.Time, cause string) (int, error) {
	if err := st.checkEntry(l, stage, id); err != nil {
		return 0, err
	}
	attempts := 0
	err := retry("retry "+id+" in stage "+stage, func() error {
		inv, err := st.takeHeld(ctx, l, stage, id)
		if err != nil {
			return err
		}
		old := entryOf(inv.Tuple)
		n := old
		n.Due, n.Attempts, n.LastError = at, min(old.Attempts, math.MaxInt32-1)+1, truncate(cause, maxCause)
		b := st.fenced(l).Check(st.sp.inverted, stateKey(l.Shard, id, stage), client.VersionIs(inv.Version))
		st.deleteEntry(b, old)
		st.insertEntry(b, n)
		if err := st.do(ctx, "retry", b, &l); err != nil {
			return err
		}
		attempts = n.Attempts
		return nil
	})
	return attempts, err
}

// DeadLetter implements scheduler.Store.
func (st *Store) DeadLetter(ctx context.Context, l scheduler.Lease, stage, id, cause string) error {
	if err := st.checkEntry(l, stage, id); err != nil {
		return err
	}
	return retry("dead-letter "+id+" of stage "+stage, func() error {
		inv, err := st.takeHeld(ctx, l, stage, id)
		if err != nil {
			return err
		}
		e := entryOf(inv.Tuple)
		b := st.fenced(l).Check(st.sp.inverted, stateKey(l.Shard, id, stage), client.VersionIs(inv.Version))
		st.deleteEntry(b, e)
		b.Replace(st.sp.dead, tuple.Tuple{shardKey(l.Shard), tuple.String(stage), tuple.String(id), u64(int64(e.Attempts)),
			tuple.String(truncate(cause, maxCause)), micros(time.Now())})
		return st.do(ctx, "dead-letter", b, &l)
	})
}

func deadOf(t tuple.Tuple) scheduler.DeadLetter {
	return scheduler.DeadLetter{Stage: strAt(t, 1), OfferID: strAt(t, 2), Attempts: int(uintAt(t, 3)), Cause: strAt(t, 4), //nolint:gosec // bounded by MaxInt32
		At: time.UnixMicro(intAt(t, 5))}
}

// DeadLetters implements scheduler.Store: each shard's, merged by time.
func (st *Store) DeadLetters(ctx context.Context, stage string, limit int) ([]scheduler.DeadLetter, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: dead-letter limit %d must be positive", scheduler.ErrInvalid, limit)
	}
	per := make([][]client.Versioned, st.shards)
	err := parallel(st.shards, func(sh int) error {
		var err error
		per[sh], err = st.rangeAll(ctx, st.sp.dead, sh, client.RangeOptions{Prefix: []tuple.Value{shardKey(sh), tuple.String(stage)}})
		return err
	})
	if err != nil {
		return nil, err
	}
	var out []scheduler.DeadLetter
	for _, rows := range per {
		for _, r := range rows {
			out = append(out, deadOf(r.Tuple))
		}
	}
	slices.SortFunc(out, func(a, b scheduler.DeadLetter) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.OfferID, b.OfferID)
	})
	return out[:min(limit, len(out))], nil
}

// Requeue implements scheduler.Store.
func (st *Store) Requeue(ctx context.Context, stage, id string, at time.Time) error {
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return err
	}
	if err := scheduler.ValidateID("offer", id); err != nil {
		return err
	}
	sh := scheduler.ShardOf(id, st.shards)
	key := []tuple.Value{shardKey(sh), tuple.String(stage), tuple.String(id)}
	return retry("requeue "+id+" in stage "+stage, func() error {
		var dead, inv client.Result
		if err := st.getAll(ctx, read{st.sp.dead, key, &dead}, read{st.sp.inverted, stateKey(sh, id, stage), &inv}); err != nil {
			return err
		}
		if !dead.Found {
			return fmt.Errorf("%w: no dead letter of offer %q in stage %q", scheduler.ErrNotFound, id, stage)
		}
		b := st.c.Batch().Check(st.sp.dead, key, client.VersionIs(dead.Version)).
			Check(st.sp.inverted, stateKey(sh, id, stage), client.VersionIs(inv.Version)).
			Delete(st.sp.dead, key)
		if !inv.Found { // queued again meanwhile: it stays as it is
			st.insertEntry(b, scheduler.Entry{Shard: sh, Stage: stage, OfferID: id, Due: at})
		}
		return st.do(ctx, "requeue", b, nil)
	})
}

// Stats implements scheduler.Store: every shard's queue of the stage is
// read (both lanes), so it costs a read of each entry.
func (st *Store) Stats(ctx context.Context, stage string) (int, time.Time, error) {
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return 0, time.Time{}, err
	}
	counts := make([]int, st.shards)
	firsts := make([]time.Time, st.shards)
	err := parallel(st.shards, func(sh int) error {
		rows, err := st.rangeAll(ctx, st.sp.queue, sh, client.RangeOptions{Prefix: []tuple.Value{shardKey(sh), tuple.String(stage)}})
		if err != nil {
			return err
		}
		counts[sh] = len(rows)
		for _, r := range rows {
			if at := time.UnixMicro(intAt(r.Tuple, 3)); firsts[sh].IsZero() || at.Before(firsts[sh]) {
				firsts[sh] = at
			}
		}
		return nil
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	n, earliest := 0, time.Time{}
	for sh := range st.shards {
		n += counts[sh]
		if !firsts[sh].IsZero() && (earliest.IsZero() || firsts[sh].Before(earliest)) {
			earliest = firsts[sh]
		}
	}
	return n, earliest, nil
}
