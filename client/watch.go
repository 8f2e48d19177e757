package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/tuple"
)

// ErrCompacted: a watch asked for changes older than a replicaset keeps of
// a bucket (Error.Msg names the bucket and the oldest revision kept).
// Recover by reading the data again and watching from then on
// (docs/changes.md, "Falling behind").
var ErrCompacted = errors.New("compacted")

// ChangeKind is what an op did to a tuple.
type ChangeKind string

// The kinds of change.
const (
	ChangeInsert  ChangeKind = "insert"
	ChangeReplace ChangeKind = "replace"
	ChangeUpdate  ChangeKind = "update"
	ChangeUpsert  ChangeKind = "upsert"
	ChangeDelete  ChangeKind = "delete"
	// ChangeScan: the tuple as the initial scan read it
	// (WatchOptions.InitialScan); its event's Revision is 0.
	ChangeScan ChangeKind = "scan"
)

// Event is one batch applied to one bucket: its changes to the watched
// spaces, with the bucket's revision after it.
type Event struct {
	Bucket   uint32
	Revision uint64
	// Time is the leader-stamped time of the batch.
	Time    time.Time
	Changes []Change
}

// Change is what one op of a batch did to one tuple.
type Change struct {
	Space string
	Kind  ChangeKind
	// Key is the tuple's primary key.
	Key tuple.Tuple
	// Tuple is the tuple after the op (nil for a delete).
	Tuple tuple.Tuple
	// Version is the tuple's version after the op (for a delete, the one
	// it had).
	Version uint64
}

// WatchOptions says what a watch follows.
type WatchOptions struct {
	// Spaces are the spaces whose changes are received (nil: every space).
	Spaces []string
	// Buckets are the buckets watched (nil: every bucket).
	Buckets []uint32
	// From resumes a watch: each bucket it holds is watched from after
	// its revision, the others from now. nil: every bucket from now.
	From *Cursor
	// InitialScan: before the changes, every tuple the watched spaces
	// hold (of the watched buckets), each as an event of one change of
	// kind ChangeScan with Revision 0, read after the watch began; then
	// the changes from that beginning on. A tuple written during the scan
	// may come both as read and as changed, in that order (applying each
	// event as "the tuple is now this" converges to the data). Not with
	// From.
	InitialScan bool
}

// Watch follows the changes of a cluster's buckets (Client.Watch).
type Watch struct {
	c    *Client
	opts WatchOptions
	ctx  context.Context
	stop context.CancelFunc
	// out carries each response's events, converted, in one item: one
	// channel handoff a response, not an event (a watch of a busy space
	// receives thousands of events a second).
	out chan watchItem

	mu       sync.Mutex
	received map[uint32]uint64 // the last revision received of each bucket (sessions resume from it)
	yielded  map[uint32]uint64 // the last revision handed to the caller (Cursor)
	sessions map[string]*watchSession
	// moved are the buckets sessions let go, for coordinate; a queue of
	// its own, so that a session never waits for coordinate, which may be
	// waiting for that session to end.
	moved    []movedBucket
	movedSig chan struct{}
	done     sync.WaitGroup
}

type watchItem struct {
	evs []Event
	err error
}

// movedBucket is a bucket a session no longer watches: it left replicaset
// from (for to, when known), or from does not hold it; at is when.
type movedBucket struct {
	bucket   uint32
	from, to string
	at       time.Time
}

// watchSession is the stream of one replicaset's buckets.
type watchSession struct {
	rs      string
	buckets map[uint32]bool
	cancel  context.CancelFunc
	ended   chan struct{}
	// begun is called once its stream has begun (its first response:
	// "now" is fixed for its buckets) or it has ended.
	begun func()
}

// Watch starts following the changes of the cluster's buckets: every
// batch applied to a watched bucket, as an Event, each bucket's in
// revision order, at least once (again only when resumed from an older
// cursor), across the buckets' moves. It keeps one stream per replicaset,
// to one of its members, and follows a bucket to the replicaset it moves
// to. Read the events with Events; Cursor says where to resume; Close
// stops it.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) (*Watch, error) {
	if opts.InitialScan && opts.From != nil {
		return nil, invalidf("watch: InitialScan reads every tuple, From resumes after a cursor: give one or the other")
	}
	rt, err := c.refresh(ctx)
	if err != nil {
		return nil, err
	}
	for _, sp := range opts.Spaces {
		if rt.spaces[sp] == nil {
			return nil, &Error{Op: "watch", Code: codes.NotFound, Msg: fmt.Sprintf("spaces: no space %q", sp), kind: ErrNotFound}
		}
	}
	buckets := opts.Buckets
	if buckets == nil {
		for b := uint32(1); b <= rt.bucketCount; b++ {
			buckets = append(buckets, b)
		}
	}
	wctx, stop := context.WithCancel(ctx)
	w := &Watch{c: c, opts: opts, ctx: wctx, stop: stop, out: make(chan watchItem, 64),
		received: map[uint32]uint64{}, yielded: map[uint32]uint64{}, sessions: map[string]*watchSession{},
		movedSig: make(chan struct{}, 1)}
	byRS := map[string][]uint32{}
	for _, b := range buckets {
		if b == 0 || b > rt.bucketCount {
			stop()
			return nil, invalidf("watch: bucket %d is out of range 1..%d", b, rt.bucketCount)
		}
		if opts.From != nil {
			if r, ok := opts.From.revs[b]; ok {
				w.received[b], w.yielded[b] = r, r
			}
		}
		byRS[rt.buckets[b]] = append(byRS[rt.buckets[b]], b)
	}
	// Watch returns once every stream has begun: a write made after it
	// returns is among the events.
	var begun sync.WaitGroup
	for rs, bs := range byRS {
		begun.Add(1)
		w.start(rs, bs, sync.OnceFunc(begun.Done))
	}
	all := make(chan struct{})
	go func() {
		begun.Wait()
		close(all)
	}()
	select {
	case <-all:
	case <-ctx.Done():
		w.Close()
		return nil, newError("watch", "", ctx.Err(), true)
	}
	w.done.Go(w.coordinate)
	return w, nil
}

// Events returns the watch's events as they come, until the watch's
// context ends, Close, or an error that ends it (ErrCompacted). Call it
// once.
func (w *Watch) Events() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if w.opts.InitialScan && !w.scan(yield) {
			return
		}
		for {
			select {
			case <-w.ctx.Done():
				return
			case it := <-w.out:
				if it.err != nil {
					yield(Event{}, it.err)
					return
				}
				for _, ev := range it.evs {
					w.mu.Lock()
					if ev.Revision > w.yielded[ev.Bucket] {
						w.yielded[ev.Bucket] = ev.Revision
					}
					w.mu.Unlock()
					if !yield(ev, nil) {
						return
					}
				}
			}
		}
	}
}

// scan yields the initial scan's tuples (WatchOptions.InitialScan) while
// the streams, begun before it, queue the changes; false when the caller
// stopped or the scan failed.
func (w *Watch) scan(yield func(Event, error) bool) bool {
	spaces := w.opts.Spaces
	if spaces == nil {
		rt := w.c.routingFor(w.ctx)
		for name := range rt.spaces {
			spaces = append(spaces, name)
		}
		slices.Sort(spaces)
	}
	var watched map[uint32]bool
	if w.opts.Buckets != nil {
		watched = map[uint32]bool{}
		for _, b := range w.opts.Buckets {
			watched[b] = true
		}
	}
	for _, name := range spaces {
		for r, err := range w.c.Space(name).Scan(w.ctx, ScanOptions{}) {
			if err != nil {
				yield(Event{}, err)
				return false
			}
			if watched != nil && !watched[r.Bucket] {
				continue
			}
			key, err := r.sp.KeyOf(r.Tuple)
			if err != nil {
				yield(Event{}, fmt.Errorf("watch: the initial scan of %s: %w", name, err))
				return false
			}
			ev := Event{Bucket: r.Bucket, Changes: []Change{{Space: name, Kind: ChangeScan, Key: key, Tuple: r.Tuple, Version: r.Version}}}
			if !yield(ev, nil) {
				return false
			}
		}
	}
	return true
}

// Cursor returns where the events Events has handed out end: resume from
// it to receive what came after them.
func (w *Watch) Cursor() Cursor {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Cursor{revs: maps.Clone(w.yielded)}
}

// Close stops the watch and waits for its streams to end.
func (w *Watch) Close() {
	w.stop()
	w.done.Wait()
}

// start starts (or restarts, with more buckets) the session of
// replicaset rs; only one goroutine at a time calls it (Watch, then
// coordinate).
func (w *Watch) start(rs string, buckets []uint32, begun func()) {
	set := map[uint32]bool{}
	w.mu.Lock()
	old := w.sessions[rs]
	w.mu.Unlock()
	if old != nil {
		old.cancel()
		<-old.ended // its buckets are its own until it ends
		maps.Copy(set, old.buckets)
	}
	for _, b := range buckets {
		set[b] = true
	}
	ctx, cancel := context.WithCancel(w.ctx)
	if begun == nil {
		begun = func() {}
	}
	s := &watchSession{rs: rs, buckets: set, cancel: cancel, ended: make(chan struct{}), begun: begun}
	w.mu.Lock()
	w.sessions[rs] = s
	w.mu.Unlock()
	w.done.Go(func() {
		defer close(s.ended)
		defer s.begun()
		w.serve(ctx, s)
	})
}

// coordinate places the buckets that sessions let go on the replicaset the
// routing table names now. While the table still names the replicaset
// that let a bucket go (a move between its freeze and its switch, or a
// member that has not applied the bucket's arrival yet), it asks again a
// little later.
func (w *Watch) coordinate() {
	backoff := retry.Backoff{Initial: 50 * time.Millisecond, Max: time.Second}
	pending := map[uint32]movedBucket{}
	for {
		if len(pending) == 0 {
			select {
			case <-w.ctx.Done():
				return
			case <-w.movedSig:
			}
		}
		w.mu.Lock()
		for _, m := range w.moved {
			pending[m.bucket] = m
		}
		w.moved = w.moved[:0]
		w.mu.Unlock()
		rt, err := w.c.refresh(w.ctx)
		if err != nil {
			if w.ctx.Err() != nil {
				return
			}
			_ = retry.Sleep(w.ctx, backoff.Next())
			continue
		}
		byRS := map[string][]uint32{}
		for b, m := range pending {
			rs := rt.buckets[b]
			if rs == "" || (m.to != "" && rs != m.to) || (rs == m.from && time.Since(m.at) < watchRecheck) {
				continue // the table does not show where it went yet
			}
			byRS[rs] = append(byRS[rs], b)
			delete(pending, b)
		}
		for rs, bs := range byRS {
			w.start(rs, bs, nil)
		}
		if len(pending) > 0 {
			_ = retry.Sleep(w.ctx, backoff.Next())
		} else {
			backoff.Reset()
		}
	}
}

// watchRecheck is how long a watch waits before it asks a replicaset
// again for a bucket it said it does not hold while the routing table
// still places the bucket there.
const watchRecheck = 500 * time.Millisecond

// serve runs a session's stream, again after every break, until its
// context ends or its buckets have all left.
func (w *Watch) serve(ctx context.Context, s *watchSession) {
	backoff := retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 0; ctx.Err() == nil && len(s.buckets) > 0; attempt++ {
		err := w.stream(ctx, s, attempt)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, ErrCompacted):
			w.fail(err)
			return
		case status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.InvalidArgument && len(w.opts.Spaces) > 0:
			// Not a member of the replicaset (the table is stale), or a
			// space it has not applied yet: place the buckets again.
			for b := range s.buckets {
				w.letGo(b, s.rs, "")
			}
			clear(s.buckets)
			return
		}
		if ctx.Err() == nil && len(s.buckets) > 0 {
			_ = retry.Sleep(ctx, backoff.Next())
		}
	}
}

// stream opens one Watch call to a member of the session's replicaset and
// reads it until it breaks.
func (w *Watch) stream(ctx context.Context, s *watchSession, attempt int) error {
	// Any member serves a watch; the leader first, which applies each
	// batch first (a follower under load applies later: measured, the
	// events' delay grew from 42 ms to 2.8 s at the median with 100
	// watchers), then the others.
	rt := w.c.routingFor(ctx)
	var addrs []string
	if l := rt.leaders[s.rs]; l != "" {
		addrs = append(addrs, l)
	}
	for _, m := range rt.members[s.rs] {
		if !slices.Contains(addrs, m.GetAddress()) {
			addrs = append(addrs, m.GetAddress())
		}
	}
	if len(addrs) == 0 {
		return status.Errorf(codes.Unavailable, "replicaset %s: no member known", s.rs)
	}
	addr := addrs[attempt%len(addrs)]
	conn, err := w.c.Conn(addr)
	if err != nil {
		return err
	}
	req := &datav1.WatchRequest{ReplicasetId: s.rs, Spaces: w.opts.Spaces, From: map[uint32]uint64{}}
	w.mu.Lock()
	for b := range s.buckets {
		if r, ok := w.received[b]; ok {
			req.From[b] = r
		} else {
			req.FromNow = append(req.FromNow, b)
		}
	}
	w.mu.Unlock()
	slices.Sort(req.FromNow)
	st, err := datav1.NewDataServiceClient(conn).Watch(ctx, req)
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return watchError(addr, err)
		}
		w.mu.Lock()
		for b, r := range resp.GetStarted() {
			w.received[b] = r
			if _, ok := w.yielded[b]; !ok {
				w.yielded[b] = r
			}
		}
		w.mu.Unlock()
		s.begun() // the first response: its buckets' "now" is fixed
		if len(resp.GetEvents()) > 0 {
			evs := make([]Event, 0, len(resp.GetEvents()))
			for _, e := range resp.GetEvents() {
				ev, err := eventOf(e)
				if err != nil {
					return err
				}
				evs = append(evs, ev)
			}
			select {
			case w.out <- watchItem{evs: evs}:
			case <-ctx.Done():
				return ctx.Err()
			}
			w.mu.Lock()
			for _, ev := range evs {
				w.received[ev.Bucket] = ev.Revision
			}
			w.mu.Unlock()
		}
		for _, l := range resp.GetLeft() {
			// Every event up to the revision the bucket left at was sent
			// (those of other spaces filtered out): ask its new replicaset
			// for what came after, not for revisions of other spaces that
			// its history may not reach back to.
			w.mu.Lock()
			if r := l.GetRevision(); r > w.received[l.GetBucket()] {
				w.received[l.GetBucket()] = r
			}
			w.mu.Unlock()
			delete(s.buckets, l.GetBucket())
			w.letGo(l.GetBucket(), s.rs, l.GetReplicasetId())
		}
		if len(s.buckets) == 0 {
			return nil
		}
	}
}

func (w *Watch) letGo(b uint32, from, to string) {
	w.mu.Lock()
	w.moved = append(w.moved, movedBucket{bucket: b, from: from, to: to, at: time.Now()})
	w.mu.Unlock()
	select {
	case w.movedSig <- struct{}{}:
	default:
	}
}

func (w *Watch) fail(err error) {
	select {
	case w.out <- watchItem{err: err}:
	case <-w.ctx.Done():
	}
}

// watchError maps a broken Watch call; a Compacted detail makes it
// ErrCompacted.
func watchError(addr string, err error) error {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if _, ok := d.(*datav1.Compacted); ok {
			return &Error{Op: "watch", Peer: addr, Code: st.Code(), Msg: st.Message(), kind: ErrCompacted}
		}
	}
	return err
}

func eventOf(e *datav1.WatchEvent) (Event, error) {
	ev := Event{Bucket: e.GetBucket(), Revision: e.GetRevision(), Time: time.UnixMilli(e.GetTimeUnixMs())}
	for _, ch := range e.GetChanges() {
		key, err := tuple.DecodeTuple(ch.GetKey())
		if err != nil {
			return Event{}, fmt.Errorf("watch: bucket %d revision %d: the key of a change in %s: %w", e.GetBucket(), e.GetRevision(), ch.GetSpace(), err)
		}
		c := Change{Space: ch.GetSpace(), Kind: changeKind(ch.GetKind()), Key: key, Version: ch.GetVersion()}
		if len(ch.GetTuple()) > 0 {
			if c.Tuple, err = tuple.DecodeTuple(ch.GetTuple()); err != nil {
				return Event{}, fmt.Errorf("watch: bucket %d revision %d: a tuple of %s: %w", e.GetBucket(), e.GetRevision(), ch.GetSpace(), err)
			}
		}
		ev.Changes = append(ev.Changes, c)
	}
	return ev, nil
}

func changeKind(k datav1.OpKind) ChangeKind {
	switch k {
	case datav1.OpKind_OP_KIND_INSERT:
		return ChangeInsert
	case datav1.OpKind_OP_KIND_REPLACE:
		return ChangeReplace
	case datav1.OpKind_OP_KIND_UPDATE:
		return ChangeUpdate
	case datav1.OpKind_OP_KIND_UPSERT:
		return ChangeUpsert
	case datav1.OpKind_OP_KIND_DELETE:
		return ChangeDelete
	}
	return ChangeKind(k.String())
}
