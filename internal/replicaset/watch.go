package replicaset

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
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
func (s *Storage) Watch(ctx context.Context, req *datav1.WatchRequest, send func(*datav1.WatchResponse) error) error {
	if req.GetReplicasetId() != s.cfg.ReplicasetID {
		return status.Errorf(codes.FailedPrecondition, "this instance is a member of replicaset %s, not %s", s.cfg.ReplicasetID, req.GetReplicasetId())
	}
	if err := s.watchLive(); err != nil {
		return err
	}
	w := &watcher{s: s, ctx: ctx, send: send, cursor: map[uint32]uint64{}, out: &datav1.WatchResponse{}}
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
		w.cursor[b] = rev
	}
	if len(req.GetFromNow()) > 0 {
		w.out.Started = map[uint32]uint64{}
		for _, b := range req.GetFromNow() {
			rev, err := s.sm.RevisionOf(s.cfg.DB, b)
			if err != nil {
				return status.Error(codes.Internal, err.Error())
			}
			w.cursor[b] = rev
			w.out.Started[b] = rev
		}
	}
	for _, b := range slices.Sorted(maps.Keys(w.cursor)) {
		if err := w.catchUp(b); err != nil {
			return err
		}
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
			for _, b := range slices.Sorted(maps.Keys(w.cursor)) {
				if err := w.catchUp(b); err != nil {
					return err
				}
			}
		}
		for _, it := range items {
			cur, watched := w.cursor[it.bucket]
			switch {
			case !watched:
			case it.ev == nil || it.ev.GetRevision() != cur+1:
				// The bucket's record changed, or an event is not the
				// next one (the database has those between).
				if err := w.catchUp(it.bucket); err != nil {
					return err
				}
			default:
				if err := w.deliver(it.ev, it.api); err != nil {
					return err
				}
			}
			if len(w.out.GetEvents()) >= watchBatch {
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
	send   func(*datav1.WatchResponse) error
	spaces map[uint32]bool   // nil: every space
	cursor map[uint32]uint64 // the buckets watched and the last revision sent
	out    *datav1.WatchResponse
}

// catchUp sends what bucket b's history holds after the watcher's
// revision, and ends the bucket with a BucketLeft when it is not active
// or receiving here (its events are final then: every one was applied
// before its record changed).
func (w *watcher) catchUp(b uint32) error {
	s := w.s
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	st, err := s.sm.BucketStateOf(snap, b)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	cur := w.cursor[b]
	rev, err := s.sm.RevisionOf(snap, b)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if rev > cur {
		// Does the history reach back to the cursor? Asked before any
		// event is sent: a watcher never gets events past a gap.
		first, err := s.sm.Events(snap, b, cur, func(*rspb.Event) bool { return false })
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if first != cur+1 {
			if st.GetState() == rspb.BucketState_STATE_RECEIVING && !st.GetCopied() {
				// The bucket is arriving: its source's history comes with
				// the copy's last chunks. The watcher asks again later.
				w.out.Left = append(w.out.Left, &datav1.BucketLeft{Bucket: b, Revision: cur})
				delete(w.cursor, b)
				return nil
			}
			oldest := first
			if oldest == 0 {
				oldest = rev // nothing kept before the bucket's revision
			}
			return compacted(b, cur, oldest, s.cfg.ReplicasetID)
		}
		var sendErr error
		_, err = s.sm.Events(snap, b, cur, func(ev *rspb.Event) bool {
			if sendErr = w.deliver(ev, nil); sendErr != nil {
				return false
			}
			if len(w.out.GetEvents()) >= watchBatch {
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
	w.out.Left = append(w.out.Left, &datav1.BucketLeft{Bucket: b, Revision: w.cursor[b], ReplicasetId: to})
	delete(w.cursor, b)
	return nil
}

// deliver adds ev to the next response, with its changes of the watched
// spaces (perhaps none), and moves the bucket's cursor. shared, when not
// nil, is the feed's one conversion of ev for every watcher: used as it
// is when this watcher watches every space ev changed.
func (w *watcher) deliver(ev *rspb.Event, shared *sharedEvent) error {
	b := ev.GetBucket()
	if ev.GetRevision() <= w.cursor[b] {
		return nil
	}
	w.cursor[b] = ev.GetRevision()
	var out *datav1.WatchEvent
	var err error
	if shared != nil && w.watchesAll(ev) {
		out, err = shared.get(w.s.sm.Schema(), ev)
	} else {
		out, err = apiEvent(w.s.sm.Schema(), ev, w.spaces)
	}
	if err != nil {
		return err
	}
	// Sent even with no change of a watched space: each bucket's
	// revisions arrive one after another, so a gap is seen as one.
	w.out.Events = append(w.out.Events, out)
	return nil
}

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

// sharedEvent is a feed event's conversion for the API, made once, by
// the first watcher that sends it, for all: the watchers send the same
// message (never changed after it is made).
type sharedEvent struct {
	once sync.Once
	msg  *datav1.WatchEvent
	err  error
}

func (se *sharedEvent) get(sc *Schema, ev *rspb.Event) (*datav1.WatchEvent, error) {
	se.once.Do(func() { se.msg, se.err = apiEvent(sc, ev, nil) })
	return se.msg, se.err
}

// flush sends the response under way, if it holds anything (or always,
// the first one: the watcher learns the call is served).
func (w *watcher) flush(always bool) error {
	if !always && len(w.out.GetEvents()) == 0 && len(w.out.GetLeft()) == 0 && len(w.out.GetStarted()) == 0 {
		return nil
	}
	out := w.out
	w.out = &datav1.WatchResponse{}
	return w.send(out)
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
