package replicaset

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// watchBatch bounds the events of one WatchResponse.
const watchBatch = 256

// Watch serves a watcher of some of this replicaset's buckets
// (DataService.Watch; docs/changes.md): first what each bucket's history
// holds after the watcher's revision, then the feed as the replicaset
// commits, each bucket's events in revision order. A bucket that is not
// here, or leaves (its record becomes anything but active or receiving),
// ends with a BucketLeft once every event it had here is sent. Any member
// serves it: an event exists once its batch is applied, so committed.
// send gets each WatchResponse encoded (events the feed holds are encoded
// once for all their watchers).
func (s *Storage) Watch(ctx context.Context, req *datav1.WatchRequest, send func(rpccodec.Encoded) error) error {
	if req.GetReplicasetId() != s.cfg.ReplicasetID {
		return status.Errorf(codes.FailedPrecondition, "this instance is a member of replicaset %s, not %s", s.cfg.ReplicasetID, req.GetReplicasetId())
	}
	if err := s.watchLive(); err != nil {
		return err
	}
	w := &watcher{s: s, ctx: ctx, send: send, out: &datav1.WatchResponse{}}
	if len(req.GetSpaces()) > 0 {
		w.spaces = map[uint32]bool{}
		sc := s.sm.Schema()
		for _, name := range req.GetSpaces() {
			sp := sc.ByName(name)
			if sp == nil {
				return status.Errorf(codes.InvalidArgument, "spaces: no space %q on replicaset %s", name, s.cfg.ReplicasetID)
			}
			w.spaces[sp.ID()] = true
		}
	}
	// The feed's position first: whatever commits from now on is read
	// from it, whatever committed before from the database.
	seq, wake := s.sm.feed.next()
	for b, rev := range req.GetFrom() {
		w.cursor.set(b, rev)
	}
	if len(req.GetFromNow()) > 0 {
		w.out.Started = map[uint32]uint64{}
		for _, b := range req.GetFromNow() {
			rev, err := s.sm.RevisionOf(s.cfg.DB, b)
			if err != nil {
				return status.Error(codes.Internal, err.Error())
			}
			w.cursor.set(b, rev)
			w.out.Started[b] = rev
		}
	}
	if err := w.catchUpAll(); err != nil {
		return err
	}
	if err := w.flush(true); err != nil {
		return err
	}
	live := time.NewTicker(time.Second)
	defer live.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-live.C:
			if err := s.watchLive(); err != nil {
				return err
			}
			continue
		case <-wake:
		}
		items, next, w2, behind := s.sm.feed.since(seq)
		seq, wake = next, w2
		if behind {
			// Items were dropped before this watcher read them: the
			// database has every event the feed had.
			if err := w.catchUpAll(); err != nil {
				return err
			}
		}
		for _, it := range items {
			cur, watched := w.cursor.get(it.bucket)
			switch {
			case !watched:
			case it.ev == nil || it.ev.GetRevision() != cur+1:
				// The bucket's record changed, or an event is not the
				// next one (the database has those between).
				if err := w.catchUpOne(it.bucket); err != nil {
					return err
				}
			default:
				if err := w.deliver(it.ev, it.api); err != nil {
					return err
				}
			}
			if w.events >= watchBatch {
				if err := w.flush(false); err != nil {
					return err
				}
			}
		}
		if err := w.flush(false); err != nil {
			return err
		}
	}
}

// WatchLeaderSilence is how long a member serving a watch may go without
// hearing from its replicaset's leader: then it ends the watch
// (UNAVAILABLE), for the watcher to ask another member, rather than
// leave it waiting for events a member cut off does not get.
const WatchLeaderSilence = 3 * time.Second

// watchLive refuses to go on serving a watch from a member cut off from
// its leader.
func (s *Storage) watchLive() error {
	if s.g == nil {
		return nil
	}
	if c := s.g.LeaderContact(); c.IsZero() || time.Since(c) > WatchLeaderSilence {
		return status.Errorf(codes.Unavailable, "replicaset %s: this member has not heard from a leader for %v: watch on another member", s.cfg.ReplicasetID, WatchLeaderSilence)
	}
	return nil
}

// watcher is one Watch call's state.
type watcher struct {
	s      *Storage
	ctx    context.Context
	send   func(rpccodec.Encoded) error
	spaces map[uint32]bool // nil: every space
	cursor bucketRevs      // the buckets watched and the last revision sent
	// The response under way: its events encoded (WatchResponse's field
	// events, one element after another), how many, and the rest of it.
	enc    []byte
	events int
	out    *datav1.WatchResponse
}

// bucketRevs is a watcher's cursor: the last revision sent of each bucket
// it watches. The feed loop asks it for every item the replicaset commits,
// in every watcher, so it is an array indexed by bucket (in pages of
// bucketRevsPage buckets, made as they are first used) rather than a map.
type bucketRevs struct {
	pages [][]uint64 // pages[b/bucketRevsPage][b%bucketRevsPage]: revision+1; 0: not watched
}

const bucketRevsPage = 512

func (c *bucketRevs) get(b uint32) (rev uint64, watched bool) {
	if p := int(b / bucketRevsPage); p < len(c.pages) && c.pages[p] != nil {
		if v := c.pages[p][b%bucketRevsPage]; v != 0 {
			return v - 1, true
		}
	}
	return 0, false
}

func (c *bucketRevs) set(b uint32, rev uint64) {
	p := int(b / bucketRevsPage)
	if p >= len(c.pages) {
		c.pages = append(c.pages, make([][]uint64, p+1-len(c.pages))...)
	}
	if c.pages[p] == nil {
		c.pages[p] = make([]uint64, bucketRevsPage)
	}
	c.pages[p][b%bucketRevsPage] = rev + 1
}

func (c *bucketRevs) drop(b uint32) {
	if p := int(b / bucketRevsPage); p < len(c.pages) && c.pages[p] != nil {
		c.pages[p][b%bucketRevsPage] = 0
	}
}

// each calls fn with every bucket watched, in ascending order, until it
// returns an error (fn may drop the bucket it is called with).
func (c *bucketRevs) each(fn func(b uint32) error) error {
	for p, page := range c.pages {
		for i, v := range page {
			if v == 0 {
				continue
			}
			if err := fn(uint32(p*bucketRevsPage + i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// catchUp sends what bucket b's history holds after the watcher's
// revision, and ends the bucket with a BucketLeft when it is not active
// or receiving here (its events are final then: every one was applied
// before its record changed).
func (w *watcher) catchUp(h *historyReader, b uint32) error {
	s := w.s
	st, err := h.state(b)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	cur, _ := w.cursor.get(b)
	rev, err := h.revision(b)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if rev > cur {
		// Does the history reach back to the cursor? Asked before any
		// event is sent: a watcher never gets events past a gap.
		first, err := h.eventsAfter(b, cur, func(*rspb.Event) bool { return false })
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if first != cur+1 {
			if st.GetState() == rspb.BucketState_STATE_RECEIVING && !st.GetCopied() {
				// The bucket is arriving: its source's history comes with
				// the copy's last chunks. The watcher asks again later.
				w.out.Left = append(w.out.Left, &datav1.BucketLeft{Bucket: b, Revision: cur})
				w.cursor.drop(b)
				return nil
			}
			oldest := first
			if oldest == 0 {
				oldest = rev // nothing kept before the bucket's revision
			}
			return compacted(b, cur, oldest, s.cfg.ReplicasetID)
		}
		var sendErr error
		_, err = h.eventsAfter(b, cur, func(ev *rspb.Event) bool {
			if sendErr = w.deliver(ev, nil); sendErr != nil {
				return false
			}
			if w.events >= watchBatch {
				sendErr = w.flush(false)
			}
			return sendErr == nil
		})
		if sendErr != nil {
			return sendErr
		}
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
	}
	switch st.GetState() {
	case rspb.BucketState_STATE_ACTIVE, rspb.BucketState_STATE_RECEIVING:
		return nil
	}
	// Not (or no longer) here.
	to := ""
	if st.GetState() == rspb.BucketState_STATE_SENDING || st.GetState() == rspb.BucketState_STATE_GARBAGE {
		to = st.GetPeer()
	}
	last, _ := w.cursor.get(b)
	w.out.Left = append(w.out.Left, &datav1.BucketLeft{Bucket: b, Revision: last, ReplicasetId: to})
	w.cursor.drop(b)
	return nil
}

// catchUpAll is catchUp of every bucket watched, from one snapshot.
func (w *watcher) catchUpAll() error {
	h, err := w.s.sm.newHistoryReader(w.s.cfg.DB)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer h.Close()
	return w.cursor.each(func(b uint32) error { return w.catchUp(h, b) })
}

// catchUpOne is catchUp of bucket b alone.
func (w *watcher) catchUpOne(b uint32) error {
	h, err := w.s.sm.newHistoryReader(w.s.cfg.DB)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer h.Close()
	return w.catchUp(h, b)
}

// deliver adds ev to the next response, with its changes of the watched
// spaces (perhaps none), and moves the bucket's cursor. shared, when not
// nil, is the feed's one conversion of ev for every watcher: used as it
// is when this watcher watches every space ev changed.
func (w *watcher) deliver(ev *rspb.Event, shared *sharedEvent) error {
	b := ev.GetBucket()
	if cur, _ := w.cursor.get(b); ev.GetRevision() <= cur {
		return nil
	}
	w.cursor.set(b, ev.GetRevision())
	var enc []byte
	var err error
	if shared != nil && w.watchesAll(ev) {
		enc, err = shared.get(w.s.sm.Schema(), ev)
	} else {
		enc, err = encodeEvent(w.s.sm.Schema(), ev, w.spaces)
	}
	if err != nil {
		return err
	}
	// Sent even with no change of a watched space: each bucket's
	// revisions arrive one after another, so a gap is seen as one.
	w.enc = protowire.AppendTag(w.enc, watchResponseEvents, protowire.BytesType)
	w.enc = protowire.AppendBytes(w.enc, enc)
	w.events++
	return nil
}

// watchResponseEvents is the number of WatchResponse's field events.
const watchResponseEvents = 1

// watchesAll reports whether the watcher watches every space ev changed.
func (w *watcher) watchesAll(ev *rspb.Event) bool {
	if w.spaces == nil {
		return true
	}
	for _, op := range ev.GetOps() {
		if !w.spaces[op.GetSpaceId()] {
			return false
		}
	}
	return true
}

// apiEvent converts ev for watchers of spaces (nil: every space).
func apiEvent(sc *Schema, ev *rspb.Event, spaces map[uint32]bool) (*datav1.WatchEvent, error) {
	out := &datav1.WatchEvent{Bucket: ev.GetBucket(), Revision: ev.GetRevision(), TimeUnixMs: ev.GetTimeUnixMs()}
	for _, op := range ev.GetOps() {
		if spaces != nil && !spaces[op.GetSpaceId()] {
			continue
		}
		name := fmt.Sprintf("#%d", op.GetSpaceId()) // dropped since
		if sp := sc.ByID(op.GetSpaceId()); sp != nil {
			name = sp.Name()
		}
		// The history keeps the key's order-preserving encoding; a
		// watcher gets its parts as a tuple, as the API's keys are.
		parts, err := tuple.DecodeKey(op.GetKey())
		if err != nil {
			return nil, status.Errorf(codes.Internal, "bucket %d revision %d: a key in space %s: %v", ev.GetBucket(), ev.GetRevision(), name, err)
		}
		out.Changes = append(out.Changes, &datav1.Change{Space: name, Kind: datav1.OpKind(op.GetKind()), Key: tuple.AppendTuple(nil, parts),
			Tuple: op.GetTuple(), Version: op.GetVersion()})
	}
	return out, nil
}

// encodeEvent is ev for watchers of spaces (nil: every space), encoded.
func encodeEvent(sc *Schema, ev *rspb.Event, spaces map[uint32]bool) ([]byte, error) {
	out, err := apiEvent(sc, ev, spaces)
	if err != nil {
		return nil, err
	}
	return out.MarshalVT()
}

// sharedEvent is a feed event's conversion for the API, encoded, made
// once, by the first watcher that sends it, for all: the watchers send the
// same bytes (never changed after they are made).
type sharedEvent struct {
	once sync.Once
	enc  []byte
	err  error
}

func (se *sharedEvent) get(sc *Schema, ev *rspb.Event) ([]byte, error) {
	se.once.Do(func() { se.enc, se.err = encodeEvent(sc, ev, nil) })
	return se.enc, se.err
}

// flush sends the response under way, if it holds anything (or always,
// the first one: the watcher learns the call is served).
func (w *watcher) flush(always bool) error {
	if !always && w.events == 0 && len(w.out.GetLeft()) == 0 && len(w.out.GetStarted()) == 0 {
		return nil
	}
	rest, err := w.out.MarshalVT()
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	// The fields of a message may come in any order: the events, then the
	// rest. A new buffer each time: the one sent may still be queued.
	msg := append(w.enc, rest...)
	w.enc = make([]byte, 0, cap(msg))
	w.events = 0
	w.out = &datav1.WatchResponse{}
	return w.send(rpccodec.Encoded(msg))
}

// compacted is the refusal of a watch whose revision of bucket b is
// older than the history kept.
func compacted(b uint32, rev, oldest uint64, rs string) error {
	st := status.Newf(codes.OutOfRange, "bucket %d: revision %d is compacted on replicaset %s: its history starts at revision %d; read the bucket again (a scan) and watch from its revision (docs/changes.md)", b, rev, rs, oldest)
	if d, err := st.WithDetails(&datav1.Compacted{Bucket: b, Revision: rev, Oldest: oldest}); err == nil {
		return d.Err()
	}
	return st.Err()
}
