package clusterstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
)

// The batch calls put the writes of many saves, offers or acks of one
// shard into one batch of the shard's bucket (a batch holds at most
// maxBatchOps operations: the cluster's limit is 1,000), each write
// checked against what it read as alone. When a check fails (another
// writer came between), the call reads again.
const (
	maxBatchOps = 900
	// savesPerBatch bounds the saves of one batch: a save is up to 14
	// operations.
	savesPerBatch = 60
)

// SaveMany implements scheduler.Store: the saves' rows are read together,
// and the saves written in one fenced batch (per savesPerBatch). A save
// refused on its own (ErrConflict, ErrNotFound, ErrInvalid) is left out;
// when the batch fails a check, its saves are written one by one.
func (st *Store) SaveMany(ctx context.Context, l scheduler.Lease, saves []scheduler.Save) ([]scheduler.Saved, []error, error) {
	saved := make([]scheduler.Saved, len(saves))
	todo, errs := scheduler.OncePerOffer("SaveMany", len(saves),
		func(i int) error { return st.checkSave(l, saves[i]) }, func(i int) string { return saves[i].OfferID })
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), savesPerBatch)]
		todo = todo[len(chunk):]
		if err := st.saveChunk(ctx, l, saves, chunk, saved, errs); err != nil {
			return saved, errs, err
		}
	}
	return saved, errs, nil
}

func (st *Store) saveChunk(ctx context.Context, l scheduler.Lease, saves []scheduler.Save, chunk []int, saved []scheduler.Saved, errs []error) error {
	rows := make([]saveRows, len(chunk))
	err := parallel(len(chunk), func(j int) error {
		var err error
		rows[j], err = st.readSave(ctx, l, saves[chunk[j]], false)
		return err
	})
	if err != nil {
		return err
	}
	b := st.fenced(l)
	n := 0
	var needMark []int // positions in chunk of saves that change their offer
	for j, i := range chunk {
		saved[i], errs[i] = st.buildSave(l, saves[i], rows[j], b)
		switch {
		case errors.Is(errs[i], errNeedMark):
			needMark = append(needMark, j)
		case errs[i] == nil:
			n++
		}
	}
	if err := parallel(len(needMark), func(k int) error {
		j := needMark[k]
		return st.readMark(ctx, l, saves[chunk[j]], &rows[j])
	}); err != nil {
		return err
	}
	for _, j := range needMark {
		i := chunk[j]
		if saved[i], errs[i] = st.buildSave(l, saves[i], rows[j], b); errs[i] == nil {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	switch err := st.do(ctx, "save offers", b, &l); {
	case err == nil:
		return nil
	case !errors.Is(err, errRetry):
		return err
	}
	// A check failed: each save on its own, reading again.
	for _, i := range chunk {
		if errs[i] != nil {
			continue
		}
		saved[i], errs[i] = st.Save(ctx, l, saves[i])
		if errors.Is(errs[i], scheduler.ErrFenced) {
			return errs[i]
		}
	}
	return nil
}

// checkSave is Save's check of its arguments.
func (st *Store) checkSave(l scheduler.Lease, sv scheduler.Save) error {
	if err := st.checkEntry(l, sv.Stage, sv.OfferID); err != nil {
		return err
	}
	if sv.Body != nil && sv.Patch != nil {
		return fmt.Errorf("%w: save of offer %q by stage %q has both a body and a patch", scheduler.ErrInvalid, sv.OfferID, sv.Stage)
	}
	if sv.Body != nil {
		return scheduler.CheckBody(sv.Body)
	}
	return nil
}

// entryKey names one stage's entry of one offer.
type entryKey struct{ stage, id string }

// OfferMany implements scheduler.Store: the entries' current rows are
// read together, the offers decided in order in memory, and the entries
// that changed written in one fenced batch, each checked to be still as
// read.
func (st *Store) OfferMany(ctx context.Context, l scheduler.Lease, entries []scheduler.Entry) ([]bool, error) {
	for i, e := range entries {
		if err := st.checkEntry(l, e.Stage, e.OfferID); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		if e.Lane != scheduler.LaneMain && e.Lane != scheduler.LaneRescan {
			return nil, fmt.Errorf("%w: entry %d (offer %q, stage %q): lane %d", scheduler.ErrInvalid, i, e.OfferID, e.Stage, e.Lane)
		}
	}
	queued := make([]bool, len(entries))
	// Entries of one key stay in one chunk, in order.
	for start := 0; start < len(entries); {
		keys := map[entryKey]bool{}
		end := start
		for ; end < len(entries) && (len(keys) < maxBatchOps/5 || keys[entryKey{entries[end].Stage, entries[end].OfferID}]); end++ {
			keys[entryKey{entries[end].Stage, entries[end].OfferID}] = true
		}
		err := retry("offer entries", func() error { return st.offerChunk(ctx, l, entries[start:end], queued[start:end]) })
		if err != nil {
			return queued, err
		}
		start = end
	}
	return queued, nil
}

func (st *Store) offerChunk(ctx context.Context, l scheduler.Lease, entries []scheduler.Entry, queued []bool) error {
	var keys []entryKey
	idx := map[entryKey]int{}
	for _, e := range entries {
		k := entryKey{e.Stage, e.OfferID}
		if _, ok := idx[k]; !ok {
			idx[k] = len(keys)
			keys = append(keys, k)
		}
	}
	read := make([]client.Result, len(keys))
	err := parallel(len(keys), func(j int) error {
		var err error
		read[j], err = st.entry(ctx, l.Shard, keys[j].stage, keys[j].id)
		return err
	})
	if err != nil {
		return err
	}
	// cur is each key's entry as the offers so far leave it.
	cur := make([]*scheduler.Entry, len(keys))
	for j, r := range read {
		if r.Found {
			e := entryOf(r.Tuple)
			cur[j] = &e
		}
	}
	changed := make([]bool, len(keys))
	for i, e := range entries {
		j := idx[entryKey{e.Stage, e.OfferID}]
		n := e
		n.Shard = l.Shard
		if old := cur[j]; old != nil {
			earlier := n.Due.Before(old.Due)
			promote := n.Lane == scheduler.LaneMain && old.Lane == scheduler.LaneRescan
			if !earlier && !promote {
				queued[i] = false
				continue
			}
			if !earlier {
				n.Due = old.Due
			}
			if old.Lane == scheduler.LaneMain {
				n.Lane = scheduler.LaneMain
			}
			n.Attempts, n.LastError = old.Attempts, old.LastError
		}
		cur[j], changed[j], queued[i] = &n, true, true
	}
	b := st.fenced(l)
	for j, k := range keys {
		if !changed[j] {
			continue
		}
		b.Check(st.sp.inverted, stateKey(l.Shard, k.id, k.stage), client.VersionIs(read[j].Version))
		if read[j].Found {
			st.deleteEntry(b, entryOf(read[j].Tuple))
		}
		st.insertEntry(b, *cur[j])
	}
	return st.do(ctx, "offer entries", b, &l)
}

// AckChanges implements scheduler.Store: one fenced batch deletes the
// marks, each only while at the seq given; when one is not (it changed
// again, or was acked), the marks are read, and those still at their seq
// deleted in one batch checked to be still as read.
func (st *Store) AckChanges(ctx context.Context, l scheduler.Lease, cs []scheduler.Change) error {
	for i, c := range cs {
		if err := st.checkLeaseShard(l, c.OfferID); err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
	}
	for start := 0; start < len(cs); start += maxBatchOps / 2 {
		chunk := cs[start:min(len(cs), start+maxBatchOps/2)]
		// Most marks are still as read: first a batch that deletes each
		// only while its seq is the one read, with no read; when one
		// changed again, the whole batch is refused and the marks are read.
		b := st.fenced(l)
		for _, c := range chunk {
			key := offerKey(l.Shard, c.OfferID)
			b.Check(st.sp.marks, key, client.Where("seq", client.EQ, u64(c.Seq))).Delete(st.sp.marks, key)
		}
		switch err := st.do(ctx, "ack changed offers", b, &l); {
		case err == nil:
			continue
		case !errors.Is(err, errRetry):
			return err
		}
		err := retry("ack changed offers", func() error {
			marks := make([]client.Result, len(chunk))
			err := parallel(len(chunk), func(j int) error {
				var err error
				marks[j], err = st.get(ctx, st.sp.marks, offerKey(l.Shard, chunk[j].OfferID)...)
				return err
			})
			if err != nil {
				return err
			}
			b := st.fenced(l)
			for j, c := range chunk {
				if marks[j].Found && int64(uintAt(marks[j].Tuple, 2)) == c.Seq { //nolint:gosec // seqs are versions
					key := offerKey(l.Shard, c.OfferID)
					b.Check(st.sp.marks, key, client.VersionIs(marks[j].Version)).Delete(st.sp.marks, key)
				}
			}
			return st.do(ctx, "ack changed offers", b, &l)
		})
		if err != nil {
			return err
		}
	}
	return nil
}
