package changefeed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// errLostPart: a newer holder of the part wrote its cursor (the fence
// refused ours); the part stops, the feed goes on.
var errLostPart = errors.New("the part was taken over")

// acks tracks a part's records in flight: each bucket's events in
// revision order with the records of each not acknowledged yet. A
// bucket's cursor moves over an event once Kafka acknowledged its records
// and every earlier event's.
type acks struct {
	// sent is Config.Sent (or nil), called as an event's last record is
	// acknowledged.
	sent    func(bucket uint32, revision uint64, committed time.Time)
	mu      sync.Mutex
	cond    *sync.Cond
	done    map[uint32]uint64 // the cursor: each bucket's revision acknowledged through
	pending map[uint32][]*inFlight
	n       int // events in flight
	err     error
}

type inFlight struct {
	rev  uint64
	left int
	// at is the batch's commit time; zero for a scan's page (not
	// reported to sent).
	at time.Time
}

func newAcks(from map[uint32]uint64, sent func(uint32, uint64, time.Time)) *acks {
	a := &acks{sent: sent, done: from, pending: map[uint32][]*inFlight{}}
	a.cond = sync.NewCond(&a.mu)
	return a
}

func (a *acks) add(b uint32, rev uint64, records int, at time.Time) *inFlight {
	a.mu.Lock()
	defer a.mu.Unlock()
	e := &inFlight{rev: rev, left: records, at: at}
	a.pending[b] = append(a.pending[b], e)
	a.n++
	a.settle(b)
	return e
}

func (a *acks) ack(b uint32, e *inFlight, err error) {
	a.mu.Lock()
	if err != nil {
		if a.err == nil {
			a.err = err
		}
		a.cond.Broadcast()
		a.mu.Unlock()
		return
	}
	e.left--
	done := e.left == 0
	a.settle(b)
	a.mu.Unlock()
	if done && a.sent != nil && !e.at.IsZero() {
		a.sent(b, e.rev, e.at)
	}
}

// settle moves bucket b's cursor over its leading events with every record
// acknowledged.
func (a *acks) settle(b uint32) {
	q := a.pending[b]
	for len(q) > 0 && q[0].left <= 0 {
		a.done[b] = q[0].rev
		q = q[1:]
		a.n--
	}
	if len(q) == 0 {
		delete(a.pending, b)
	} else {
		a.pending[b] = q
	}
	if a.n == 0 {
		a.cond.Broadcast()
	}
}

func (a *acks) cursor() (client.Cursor, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return client.NewCursor(a.done), a.err
}

// drain waits until nothing is in flight, a record failed, or ctx ends.
func (a *acks) drain(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		a.mu.Lock()
		a.cond.Broadcast()
		a.mu.Unlock()
	})
	defer stop()
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.n > 0 && a.err == nil && ctx.Err() == nil {
		a.cond.Wait()
	}
}

// runPart sends part pr's buckets until its context ends (then it waits
// for Kafka's acknowledgements, saves the cursor and releases the lease)
// or it fails.
func (f *feed) runPart(ctx context.Context, pr *partRun) error {
	c := f.cfg.Client
	what := fmt.Sprintf("changefeed %s: part %d", f.cfg.Name, pr.p)
	key := []tuple.Value{tuple.String(f.cfg.Name), tuple.Uint(uint64(pr.p))}
	fence := client.Fence{Space: CursorSpace, Key: key, Field: "ticket", Ticket: pr.ticket}
	// The part's tuple, made on its first run.
	row, err := c.Batch().Insert(CursorSpace, tuple.Tuple{key[0], key[1], tuple.Uint(uint64(f.cfg.Parts)), tuple.Uint(0), tuple.String("")},
		client.IfAbsent()).Do(ctx)
	if err != nil {
		return fmt.Errorf("%s: its cursor: %w", what, err)
	}
	saved := row[0].Tuple
	if saved == nil { // inserted
		saved = tuple.Tuple{key[0], key[1], tuple.Uint(uint64(f.cfg.Parts)), tuple.Uint(0), tuple.String("")}
	}
	if parts, _ := saved[2].AsUint(); parts != uint64(f.cfg.Parts) {
		return fmt.Errorf("%s: the feed was started with %d parts, not %d: run it with --parts %d, or under another name", what, parts, f.cfg.Parts, parts)
	}
	savedText, _ := saved[4].AsString()
	curText, pending, err := splitSaved(savedText)
	if err != nil {
		return fmt.Errorf("%s: its saved cursor: %w", what, err)
	}
	buckets := partBuckets(pr.p, f.cfg.Parts, f.buckets)
	from := map[uint32]uint64{}
	opts := client.WatchOptions{Spaces: f.cfg.Spaces, Buckets: buckets}
	if curText != "" {
		cur, err := client.ParseCursor(curText)
		if err != nil {
			return fmt.Errorf("%s: its saved cursor: %w", what, err)
		}
		for _, b := range buckets {
			if r, ok := cur.Revision(b); ok {
				from[b] = r
			}
		}
		c := client.NewCursor(from)
		opts.From = &c
	}
	for b, p := range pending {
		if _, ok := from[b]; !ok {
			return fmt.Errorf("%s: its saved cursor: bucket %d is being scanned but has no revision", what, b)
		}
		// The process before may have sent one page past the progress it
		// saved (scanPageMax): number this one's records after it.
		p.Next += scanPageMax
	}
	saveText := func(ctx context.Context, s string) error {
		_, err := c.Batch().Fence(fence).
			Update(CursorSpace, key, []tuple.Op{{Code: tuple.OpAssign, Field: tuple.FieldRef{Name: "cursor"}, Arg: tuple.String(s)}}).
			Do(ctx)
		if errors.Is(err, client.ErrConditionFailed) {
			return fmt.Errorf("%s: %w (ticket %d is old): %w", what, errLostPart, pr.ticket, err)
		}
		return err
	}
	// The cursor, with the scan's progress while there is one (scan
	// moves it on before the saver starts).
	save := func(ctx context.Context, cur client.Cursor) error { return saveText(ctx, joinSaved(cur, pending)) }
	// The fence first: from now on an older holder writes no cursor.
	if err := save(ctx, client.NewCursor(from)); err != nil {
		return f.released(pr, err)
	}
	w, err := c.Watch(ctx, opts)
	if err != nil {
		return f.released(pr, fmt.Errorf("%s: %w", what, err))
	}
	defer w.Close()
	if len(from) < len(buckets) {
		// Buckets with no saved revision start now: save where that is
		// (and, with InitialScan, that their scan is to come) before
		// sending anything, so that a restart goes on from there.
		for w.Cursor().Buckets() < len(buckets) {
			select {
			case <-ctx.Done():
				return f.released(pr, nil)
			case <-time.After(10 * time.Millisecond):
			}
		}
		start := w.Cursor()
		for _, b := range buckets {
			if r, ok := start.Revision(b); ok {
				if _, had := from[b]; !had {
					from[b] = r
					if f.cfg.InitialScan {
						if pending == nil {
							pending = map[uint32]*scanPos{}
						}
						pending[b] = &scanPos{Space: slices.Min(f.cfg.Spaces)}
					}
				}
			}
		}
		if err := save(ctx, client.NewCursor(from)); err != nil {
			return f.released(pr, err)
		}
	}
	f.cfg.Logger.Info("changefeed: part started", "part", pr.p, "buckets", len(buckets), "ticket", pr.ticket, "scanning", len(pending))
	a := newAcks(maps.Clone(from), f.cfg.Sent)
	if len(pending) > 0 {
		// The initial scan, while the watch queues the changes since.
		err := f.scan(ctx, pr, a, from, pending, func(ctx context.Context) error { return save(ctx, client.NewCursor(from)) })
		switch {
		case errors.Is(err, errStopped):
			return f.released(pr, nil)
		case err != nil:
			return f.released(pr, err)
		}
		f.cfg.Logger.Info("changefeed: part scanned", "part", pr.p)
	}
	last := client.NewCursor(from).String()
	saverDone := make(chan error, 1)
	sctx, stopSaver := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(f.cfg.SaveEvery)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				saverDone <- nil
				return
			case <-t.C:
			}
			// The cursor covers acknowledged events only, so it is saved
			// even after a refused record (which ends the part).
			cur, rerr := a.cursor()
			if s := cur.String(); s != last {
				if err := save(sctx, cur); err != nil {
					if errors.Is(err, errLostPart) {
						saverDone <- err
						return
					}
					f.cfg.Logger.Warn("changefeed: saving a cursor", "part", pr.p, "err", err)
					continue
				}
				last = s
			}
			if rerr != nil {
				saverDone <- fmt.Errorf("%s: Kafka refused a record: %w", what, rerr)
				return
			}
		}
	}()
	var failure error
	saverEnded := false
	for ev, err := range w.Events() {
		if err != nil {
			if errors.Is(err, client.ErrCompacted) {
				err = fmt.Errorf("%s: %w; the feed cannot go on without losing changes: read the spaces again (shardkit scan) "+
					"and start the feed under a new --name (docs/changes.md, \"Changefeed to Kafka\")", what, err)
			}
			failure = err
			break
		}
		if time.Since(time.Unix(0, pr.renewed.Load())) > f.cfg.LeaseTTL {
			// Paused past the lease (another process may hold the part
			// now and send these events): send nothing more; what was
			// sent is saved through the fence, or refused by it.
			f.cfg.Logger.Warn("changefeed: a part's lease expired before it was renewed", "part", pr.p)
			break
		}
		if _, rerr := a.cursor(); rerr != nil {
			// Kafka refused a record: a later one of its partition must
			// not follow it, or a consumer that drops repeats by revision
			// would skip the refused one when it comes again.
			failure = fmt.Errorf("%s: Kafka refused a record: %w", what, rerr)
			break
		}
		f.send(a, ev)
		// The saver ends on its own with an error, or with nil when the
		// part's context ended: either way it sent its one value, so
		// nothing is to be waited for after the loop.
		select {
		case failure = <-saverDone:
			saverEnded = true
		default:
		}
		if saverEnded {
			break
		}
	}
	stopSaver()
	if !saverEnded {
		if err := <-saverDone; failure == nil {
			failure = err
		}
	}
	w.Close()
	if f.cfg.noFinalSave {
		return failure
	}
	if failure != nil && !errors.Is(failure, errLostPart) {
		return f.released(pr, failure)
	}
	if failure == nil {
		// Stopping: what was sent is acknowledged, then saved.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.LeaseTTL)
		defer cancel()
		a.drain(dctx)
		if cur, _ := a.cursor(); cur.String() != last {
			failure = save(dctx, cur)
		}
	}
	return f.released(pr, failure)
}

// released releases pr's lease (unless the part was taken over) and
// returns err.
func (f *feed) released(pr *partRun, err error) error {
	if errors.Is(err, errLostPart) {
		f.cfg.Logger.Info("changefeed: a part was taken over", "part", pr.p, "err", err)
		return nil
	}
	if f.cfg.noFinalSave {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.LeaseTTL)
	defer cancel()
	_, _ = f.cfg.Client.Leases().Release(ctx, f.leaseName("part", pr.p), f.cfg.Holder, pr.ticket)
	return err
}

// send produces an event's records, one per change.
func (f *feed) send(a *acks, ev client.Event) {
	e := a.add(ev.Bucket, ev.Revision, len(ev.Changes), ev.Time)
	for i, ch := range ev.Changes {
		r := Record{Space: ch.Space, Kind: ch.Kind, Key: ch.Key, Tuple: ch.Tuple, Version: ch.Version,
			Bucket: ev.Bucket, Revision: ev.Revision, Index: i, Changes: len(ev.Changes), Time: ev.Time}
		rec := &kgo.Record{
			Key:   f.recordKey(&r),
			Value: f.value(&r),
			Headers: []kgo.RecordHeader{
				{Key: HeaderBucket, Value: strconv.AppendUint(nil, uint64(ev.Bucket), 10)},
				{Key: HeaderRevision, Value: strconv.AppendUint(nil, ev.Revision, 10)},
				{Key: HeaderIndex, Value: strconv.AppendInt(nil, int64(i), 10)},
				{Key: HeaderChanges, Value: strconv.AppendInt(nil, int64(len(ev.Changes)), 10)},
			},
		}
		b := ev.Bucket
		// Produce waits while the producer's buffer is full; a record is
		// retried until Kafka takes it (or refuses it for good).
		f.kc.Produce(f.hard, rec, func(_ *kgo.Record, err error) { a.ack(b, e, err) })
	}
}

func (f *feed) value(r *Record) []byte {
	if j := f.layouts[r.Space].valueField; j >= 0 {
		if j >= len(r.Tuple) {
			return nil // a delete (or a row without the field): a tombstone
		}
		return rawValue(r.Tuple[j])
	}
	if f.cfg.Format == "protobuf" {
		return appendProto(nil, r)
	}
	return appendJSON(nil, r)
}

// rawValue is a string's or bytes' bytes as they are, any other value's
// JSON.
func rawValue(v tuple.Value) []byte {
	if b, ok := v.AsBytes(); ok {
		return b
	}
	if s, ok := v.AsString(); ok {
		return []byte(s)
	}
	j := tuple.AppendJSON(nil, tuple.Tuple{v}) // [v]
	return j[1 : len(j)-1]
}
