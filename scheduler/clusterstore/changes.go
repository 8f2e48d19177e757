package clusterstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/tuple"
)

func changeOf(t tuple.Tuple) (scheduler.Change, error) {
	c := scheduler.Change{Shard: int(uintAt(t, 0)), OfferID: strAt(t, 1), Seq: int64(uintAt(t, 2)), Source: strAt(t, 3), //nolint:gosec // written from int and int64
		Chain: int(uintAt(t, 6))} //nolint:gosec // written from int
	if boolAt(t, 4) {
		return c, nil // every field: nil
	}
	c.Fields = []string{}
	if err := json.Unmarshal([]byte(strAt(t, 5)), &c.Fields); err != nil {
		return c, fmt.Errorf("clusterstore: the mark of offer %q has unreadable fields: %w", c.OfferID, err)
	}
	return c, nil
}

// Changes implements scheduler.Store. Marks are read in offer id order
// from after the last one this store listed for the shard, wrapping
// around, so that marks made again and again at low ids do not keep the
// others waiting.
func (st *Store) Changes(ctx context.Context, l scheduler.Lease, limit int) ([]scheduler.Change, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: changes limit %d must be positive", scheduler.ErrInvalid, limit)
	}
	if l.Shard < 0 || l.Shard >= st.shards {
		return nil, fmt.Errorf("%w: %v: the store has shards 0..%d", scheduler.ErrInvalid, l, st.shards-1)
	}
	prefix := []tuple.Value{shardKey(l.Shard)}
	st.bmu.Lock()
	after, ok := st.markCursor[l.Shard]
	st.bmu.Unlock()
	o := client.RangeOptions{Prefix: prefix, Limit: limit}
	if ok {
		o.After = offerKey(l.Shard, after)
	}
	rows, err := st.rangeAll(ctx, st.sp.marks, l.Shard, o)
	if err != nil {
		return nil, err
	}
	if ok && len(rows) < limit {
		more, err := st.rangeAll(ctx, st.sp.marks, l.Shard, client.RangeOptions{Prefix: prefix, Until: offerKey(l.Shard, after), Limit: limit - len(rows)})
		if err != nil {
			return nil, err
		}
		// The one at the cursor itself comes last.
		rows = append(rows, more...)
		if len(rows) < limit {
			if r, err := st.get(ctx, st.sp.marks, offerKey(l.Shard, after)...); err != nil {
				return nil, err
			} else if r.Found {
				rows = append(rows, client.Versioned{Tuple: r.Tuple, Version: r.Version})
			}
		}
	}
	out := make([]scheduler.Change, 0, len(rows))
	for _, r := range rows {
		c, err := changeOf(r.Tuple)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	st.bmu.Lock()
	if len(out) > 0 {
		st.markCursor[l.Shard] = out[len(out)-1].OfferID
	} else {
		delete(st.markCursor, l.Shard)
	}
	st.bmu.Unlock()
	return out, nil
}

// AckChange implements scheduler.Store.
func (st *Store) AckChange(ctx context.Context, l scheduler.Lease, c scheduler.Change) error {
	if err := st.checkLeaseShard(l, c.OfferID); err != nil {
		return err
	}
	key := offerKey(l.Shard, c.OfferID)
	b := st.fenced(l).Check(st.sp.marks, key, client.Where("seq", client.EQ, u64(c.Seq))).Delete(st.sp.marks, key)
	if err := st.do(ctx, "ack a changed offer", b, &l); err != errRetry { //nolint:errorlint // do returns errRetry itself
		return err
	}
	return nil // changed again since it was read (or acked already): the mark stays
}

// Scan implements scheduler.Store.
func (st *Store) Scan(ctx context.Context, shard int, after string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: scan limit %d must be positive", scheduler.ErrInvalid, limit)
	}
	if shard < 0 || shard >= st.shards {
		return nil, fmt.Errorf("%w: shard %d: the store has shards 0..%d", scheduler.ErrInvalid, shard, st.shards-1)
	}
	o := client.RangeOptions{Prefix: []tuple.Value{shardKey(shard)}, Limit: limit}
	if after != "" {
		o.After = offerKey(shard, after)
	}
	rows, err := st.rangeAll(ctx, st.sp.offers, shard, o)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(rows))
	for j, r := range rows {
		out[j] = strAt(r.Tuple, 1)
	}
	return out, nil
}

// AfterSaves implements scheduler.Store.
func (st *Store) AfterSaves(ctx context.Context, l scheduler.Lease, stage string, limit int) ([]scheduler.Pending, error) {
	if err := scheduler.ValidateID("stage", stage); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: after-save limit %d must be positive", scheduler.ErrInvalid, limit)
	}
	rows, err := st.rangeAll(ctx, st.sp.after, l.Shard, client.RangeOptions{Prefix: []tuple.Value{shardKey(l.Shard), tuple.String(stage)}, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]scheduler.Pending, len(rows))
	for j, r := range rows {
		out[j] = scheduler.Pending{Shard: l.Shard, Stage: stage, OfferID: strAt(r.Tuple, 2), Seq: int64(uintAt(r.Tuple, 3))} //nolint:gosec // seqs fit
	}
	return out, nil
}

// AfterSaveDone implements scheduler.Store.
func (st *Store) AfterSaveDone(ctx context.Context, l scheduler.Lease, p scheduler.Pending) error {
	if err := st.checkEntry(l, p.Stage, p.OfferID); err != nil {
		return err
	}
	key := []tuple.Value{shardKey(l.Shard), tuple.String(p.Stage), tuple.String(p.OfferID)}
	b := st.fenced(l).Check(st.sp.after, key, client.Where("seq", client.EQ, u64(p.Seq))).Delete(st.sp.after, key)
	if err := st.do(ctx, "after-save done", b, &l); err != errRetry { //nolint:errorlint // do returns errRetry itself
		return err
	}
	return nil // saved again since it was read: it stays pending
}

// watchRetry is how long a lost watch waits before it starts again.
const watchRetry = time.Second

// Wakeups implements scheduler.Store: a watch of the marks, the queues and
// the pending AfterSaves, every bucket. A new mark wakes its shard's
// changed-offer loop (Stage ""), a queue row or an AfterSave its stage.
// A watch that ends is started again (from now) after watchRetry, with a
// Wakeup for everything, since what came meanwhile was not seen.
func (st *Store) Wakeups(ctx context.Context) (<-chan scheduler.Wakeup, error) {
	w, err := st.c.Watch(ctx, client.WatchOptions{Spaces: []string{st.sp.marks, st.sp.queue, st.sp.after}})
	if err != nil {
		return nil, fmt.Errorf("clusterstore: watch for wake-ups: %w", err)
	}
	ch := make(chan scheduler.Wakeup, 256)
	send := scheduler.NewWakeupSender(ch)
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			if w == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(watchRetry):
				}
				if w, err = st.c.Watch(ctx, client.WatchOptions{Spaces: []string{st.sp.marks, st.sp.queue, st.sp.after}}); err != nil {
					w = nil
					continue
				}
				send.Send(scheduler.Wakeup{Shard: -1})
			}
			for ev, err := range w.Events() {
				if err != nil {
					break
				}
				for _, c := range ev.Changes {
					if wk, ok := st.wakeupOf(c); ok {
						send.Send(wk)
					}
				}
			}
			w.Close()
			w = nil
		}
	}()
	return ch, nil
}

// wakeupOf is the wake-up a change gives: none for a delete.
func (st *Store) wakeupOf(c client.Change) (scheduler.Wakeup, bool) {
	if c.Kind == client.ChangeDelete || len(c.Key) == 0 {
		return scheduler.Wakeup{}, false
	}
	sh := int(uintAt(c.Key, 0)) //nolint:gosec // shards are small
	switch c.Space {
	case st.sp.marks:
		return scheduler.Wakeup{Shard: sh}, true
	case st.sp.queue, st.sp.after:
		return scheduler.Wakeup{Shard: sh, Stage: strAt(c.Key, 1)}, true
	}
	return scheduler.Wakeup{}, false
}
