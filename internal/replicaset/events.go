package replicaset

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// A bucket's change history (docs/changes.md). Every batch applied to a
// bucket raises its revision by one (bumpRevision) and is kept as an Event
// under e/<bucket><revision>: the tuples it changed, after the change. A
// bucket keeps its last revisions within the replicaset's HistoryLimits
// (SetHistory): apply trims the oldest when a bucket holds eventTrimSlack
// revisions or an eighth of the bytes more than the limits, down to them.
// It decides from what the bucket's history holds (learned by a read of
// it the first time apply writes to the bucket, then kept up), never from
// anything a member alone knows, so every member keeps the same. The
// history travels with the bucket (the copy's last chunks) and is deleted
// with it at cleanup.
//
// Watchers read the history from two places: the feed, the events and
// bucket-record changes the replicaset committed lately, in memory and
// shared by every watcher; and the database, when a watcher starts from
// an older revision or falls behind the feed.

// HistoryLimits bounds each bucket's change history: a watcher behind
// what a bucket keeps gets ErrCompacted's refusal.
type HistoryLimits struct {
	Revisions uint32 // the revisions kept, at most
	Bytes     uint64 // the bytes of their records (keys and values), at most
}

// DefaultHistory is what a replicaset keeps until its leader proposes
// its configuration (`shardkit run --history-revisions, --history-bytes`).
var DefaultHistory = HistoryLimits{Revisions: 1024, Bytes: 1 << 20}

// The limits' own bounds, refused outside them.
const (
	MinHistoryRevisions = 16
	MaxHistoryRevisions = 1 << 24
	MinHistoryBytes     = 64 << 10
)

// Check refuses limits outside their bounds, naming the setting.
func (l HistoryLimits) Check() error {
	if l.Revisions < MinHistoryRevisions || l.Revisions > MaxHistoryRevisions {
		return fmt.Errorf("history revisions %d: want %d to %d", l.Revisions, MinHistoryRevisions, MaxHistoryRevisions)
	}
	if l.Bytes < MinHistoryBytes {
		return fmt.Errorf("history bytes %d: want at least %d", l.Bytes, MinHistoryBytes)
	}
	return nil
}

// eventTrimSlack: apply trims a bucket's history once it holds this many
// revisions more than the limit (or an eighth more bytes): one range
// deletion for many revisions.
const eventTrimSlack = 64

// history is h/: the history's limits, a SetHistory.
func (k keys) history() []byte { return k.sub(storage.DataHistory, 0) }

// loadHistory reads the applied limits (DefaultHistory if none).
func loadHistory(r pebble.Reader, k keys) (*HistoryLimits, error) {
	v, err := get(r, k.history())
	if err != nil || v == nil {
		d := DefaultHistory
		return &d, err
	}
	c := &rspb.SetHistory{}
	if err := c.UnmarshalVT(v); err != nil {
		return nil, fmt.Errorf("replicaset: the history's limits: %w", err)
	}
	return &HistoryLimits{Revisions: c.GetRevisions(), Bytes: c.GetBytes()}, nil
}

// History returns the limits applied.
func (sm *SM) History() HistoryLimits { return *sm.history.Load() }

// setHistory applies new limits; buckets are trimmed to them as they
// are next written.
func (a *applier) setHistory(c *rspb.SetHistory) error {
	lim := HistoryLimits{Revisions: c.GetRevisions(), Bytes: c.GetBytes()}
	if err := lim.Check(); err != nil {
		return fmt.Errorf("replicaset: %w", err)
	}
	v, err := c.MarshalVT()
	if err != nil {
		a.err = err
		return nil
	}
	a.set(a.sm.k.history(), v)
	a.sm.history.Store(&lim)
	return nil
}

// bucketHistory is what a bucket's history holds.
type bucketHistory struct {
	n     uint64 // how many revisions
	bytes uint64 // their records' keys and values
}

// bucketHistory returns what bucket b's history holds, read the first
// time it is asked for after a load or a change from outside apply's
// own writes (a copy).
func (a *applier) bucketHistory(b uint32) *bucketHistory {
	if h := a.sm.hist[b]; h != nil {
		return h
	}
	h := &bucketHistory{}
	if a.err != nil {
		return h
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: a.sm.k.bucketEvents(b), UpperBound: storage.PrefixEnd(a.sm.k.bucketEvents(b))})
	if err != nil {
		a.err = err
		return h
	}
	for ok := it.First(); ok; ok = it.Next() {
		h.n++
		h.bytes += uint64(len(it.Key()) + len(it.Value()))
	}
	if err := it.Close(); err != nil {
		a.err = err
		return h
	}
	a.sm.hist[b] = h
	return h
}

// trimHistory deletes bucket b's oldest revisions while it holds more
// than the limits allow (keeping the newest, whatever its size), once it
// holds eventTrimSlack revisions or an eighth of the bytes over them.
func (a *applier) trimHistory(b uint32, h *bucketHistory) {
	lim := a.sm.History()
	if a.err != nil || (h.n <= uint64(lim.Revisions)+eventTrimSlack && h.bytes <= lim.Bytes+lim.Bytes/8) {
		return
	}
	it, err := a.b.NewIter(&pebble.IterOptions{LowerBound: a.sm.k.bucketEvents(b), UpperBound: storage.PrefixEnd(a.sm.k.bucketEvents(b))})
	if err != nil {
		a.err = err
		return
	}
	var keep uint64 // the oldest revision kept
	for ok := it.First(); ok && h.n > 1 && (h.n > uint64(lim.Revisions) || h.bytes > lim.Bytes); ok = it.Next() {
		h.n--
		h.bytes -= uint64(len(it.Key()) + len(it.Value()))
		keep = binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:]) + 1
	}
	if err := it.Close(); err != nil {
		a.err = err
		return
	}
	if keep > 0 {
		a.deleteRange(a.sm.k.event(b, 0), a.sm.k.event(b, keep))
	}
}

// event is e/<bucket:4><revision:8>.
func (k keys) event(b uint32, rev uint64) []byte {
	out := binary.BigEndian.AppendUint32(k.sub(storage.DataEvent, 12), b)
	return binary.BigEndian.AppendUint64(out, rev)
}

// bucketEvents is e/<bucket:4>: one bucket's history.
func (k keys) bucketEvents(b uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataEvent, 4), b)
}

// recordEvent keeps the batch c, applied with result res at revision
// res.Revision, in its bucket's history, and stages it for the feed.
func (a *applier) recordEvent(c *rspb.Batch, res *rspb.BatchResult) {
	if a.err != nil {
		return
	}
	b, rev := c.GetBucket(), res.GetRevision()
	ev := &rspb.Event{Bucket: b, Revision: rev, TimeUnixMs: a.now}
	for i, op := range c.GetOps() {
		r := res.GetResults()[i]
		eo := &rspb.EventOp{SpaceId: op.GetSpaceId(), Kind: op.GetKind(), Key: op.GetKey(), Version: r.GetVersion()}
		switch op.GetKind() {
		case rspb.OpKind_OP_KIND_CHECK:
			continue
		case rspb.OpKind_OP_KIND_DELETE:
			if !r.GetFound() {
				continue // nothing was deleted
			}
		case rspb.OpKind_OP_KIND_UPDATE:
			if !r.GetFound() {
				continue // no tuple: nothing was updated
			}
			eo.Tuple = r.GetTuple()
		case rspb.OpKind_OP_KIND_INSERT:
			if r.GetFound() {
				continue // if_absent, and present: skipped
			}
			eo.Tuple = r.GetTuple()
		default:
			eo.Tuple = r.GetTuple()
		}
		ev.Ops = append(ev.Ops, eo)
	}
	v, err := ev.MarshalVT()
	if err != nil {
		a.err = err
		return
	}
	h := a.bucketHistory(b)
	k := a.sm.k.event(b, rev)
	a.setUncached(k, v)
	h.n++
	h.bytes += uint64(len(k) + len(v))
	a.trimHistory(b, h)
	a.sm.pendingEvents = append(a.sm.pendingEvents, eventItem(ev, len(v)))
}

// copyEvents keeps a moving bucket's history as its source sent it: the
// revisions it lacks (its own, written since the move began, are above
// the source's last).
func (a *applier) copyEvents(b uint32, evs [][]byte) {
	if len(evs) > 0 {
		delete(a.sm.hist, b) // read again when next written
	}
	for _, v := range evs {
		if a.err != nil {
			return
		}
		_, rev, _ := eventStamp(v) // of bucket b, checked (copyChunks: checkCopied)
		k := a.sm.k.event(b, rev)
		if a.get(k) != nil {
			continue
		}
		a.setUncached(k, v) // kept as the source stored it
	}
}

// Events calls fn with bucket b's kept history after revision after, in
// revision order, as r holds it, until fn returns false. It returns the
// first revision it found (0: none).
func (sm *SM) Events(r pebble.Reader, b uint32, after uint64, fn func(*rspb.Event) bool) (first uint64, err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: sm.k.event(b, after+1), UpperBound: storage.PrefixEnd(sm.k.bucketEvents(b))})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	return eventsAt(it, it.First(), storage.PrefixEnd(sm.k.bucketEvents(b)), fn)
}

// EventBytes calls fn with bucket b's kept history after revision after,
// each event as stored (an Event's encoding, fn's until it returns), in
// revision order, until fn returns false: what a copy sends as it is.
func (sm *SM) EventBytes(r pebble.Reader, b uint32, after uint64, fn func(v []byte) bool) (first uint64, err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: sm.k.event(b, after+1), UpperBound: storage.PrefixEnd(sm.k.bucketEvents(b))})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	return eventBytesAt(it, it.First(), storage.PrefixEnd(sm.k.bucketEvents(b)), fn)
}

// eventsAt calls fn with the events from it's position (ok: it has one)
// up to the key end, until fn returns false, and returns the first
// revision it found (0: none).
func eventsAt(it *pebble.Iterator, ok bool, end []byte, fn func(*rspb.Event) bool) (first uint64, err error) {
	var bad error
	first, err = eventBytesAt(it, ok, end, func(v []byte) bool {
		ev := &rspb.Event{}
		if bad = ev.UnmarshalVT(v); bad != nil {
			bad = fmt.Errorf("replicaset: event %x: %w", it.Key(), bad)
			return false
		}
		return fn(ev)
	})
	return first, cmp.Or(bad, err)
}

// eventBytesAt is eventsAt with each event as stored; the first revision
// is its key's.
func eventBytesAt(it *pebble.Iterator, ok bool, end []byte, fn func(v []byte) bool) (first uint64, err error) {
	for ; ok && bytes.Compare(it.Key(), end) < 0; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return first, err
		}
		if first == 0 {
			k := it.Key()
			first = binary.BigEndian.Uint64(k[len(k)-8:])
		}
		if !fn(v) {
			break
		}
	}
	return first, it.Error()
}

// historyReader reads what a watcher catching up needs of buckets, from
// one snapshot: their records, revisions and change history, one
// iterator each, sought forward from bucket to bucket (pebble turns a
// seek past the last into steps), so catching up thousands of buckets is
// three walks rather than three fresh reads a bucket. Buckets are read in
// ascending order.
type historyReader struct {
	sm                   *SM
	snap                 *pebble.Snapshot
	states, revs, events *pebble.Iterator
}

func (sm *SM) newHistoryReader(db *pebble.DB) (*historyReader, error) {
	h := &historyReader{sm: sm, snap: db.NewSnapshot()}
	var err error
	open := func(prefix []byte) *pebble.Iterator {
		if err != nil {
			return nil
		}
		var it *pebble.Iterator
		it, err = h.snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
		return it
	}
	h.states = open(sm.k.buckets())
	h.revs = open(sm.k.revisions())
	h.events = open(sm.k.sub(storage.DataEvent, 0))
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func (h *historyReader) Close() {
	for _, it := range []*pebble.Iterator{h.states, h.revs, h.events} {
		if it != nil {
			_ = it.Close()
		}
	}
	_ = h.snap.Close()
}

// seekValue returns the value of key, read by it (nil: none).
func seekValue(it *pebble.Iterator, key []byte) ([]byte, error) {
	if !it.SeekGE(key) || !bytes.Equal(it.Key(), key) {
		return nil, it.Error()
	}
	return it.ValueAndErr()
}

// state is bucket b's record (nil: none).
func (h *historyReader) state(b uint32) (*rspb.BucketState, error) {
	v, err := seekValue(h.states, h.sm.k.bucket(b))
	if err != nil || v == nil {
		return nil, err
	}
	return decodeBucketState(b, v)
}

// revision is bucket b's revision.
func (h *historyReader) revision(b uint32) (uint64, error) {
	v, err := seekValue(h.revs, h.sm.k.revision(b))
	if err != nil || v == nil {
		return 0, err
	}
	return decodeRevision(b, v)
}

// eventsAfter is SM.Events of bucket b from the snapshot.
func (h *historyReader) eventsAfter(b uint32, after uint64, fn func(*rspb.Event) bool) (first uint64, err error) {
	return eventsAt(h.events, h.events.SeekGE(h.sm.k.event(b, after+1)), storage.PrefixEnd(h.sm.k.bucketEvents(b)), fn)
}

// OldestEvent returns the oldest revision of bucket b's history r keeps
// (0: none).
func (sm *SM) OldestEvent(r pebble.Reader, b uint32) (uint64, error) {
	return sm.Events(r, b, 0, func(*rspb.Event) bool { return false })
}

// feed is what the replicaset committed lately, newest last: events and
// changes of bucket records, for every watcher to read in one place
// (publish runs once an apply batch is committed). It keeps the last
// items up to limit bytes (when over, it drops the oldest down to half);
// a watcher that falls further behind reads the database, which costs it
// a read and an encoding per event rather than a share of one.
type feed struct {
	mu    sync.Mutex
	items []feedItem
	base  uint64 // the sequence number of items[0]
	bytes int    // the items' sizes
	limit int
	wake  chan struct{}
}

// FeedBytes bounds the memory of a replicaset member's feed: at 5,000
// events a second of 100-byte tuples, about 20 s of them.
const FeedBytes = 32 << 20

// feedItemBytes is a feed item's share of memory beyond its event.
const feedItemBytes = 64

// feedItem is an event (with its conversion for the API, made once), or
// a bucket whose record changed (ev nil).
type feedItem struct {
	ev     *rspb.Event
	api    *sharedEvent
	bucket uint32
	size   int // the event and its encoding for the API, about
}

func newFeed(limit int) *feed { return &feed{wake: make(chan struct{}), limit: limit} }

// eventItem is the feed's item of ev, whose encoding has n bytes (its
// conversion for the API takes about as many).
func eventItem(ev *rspb.Event, n int) feedItem {
	return feedItem{ev: ev, api: &sharedEvent{}, bucket: ev.GetBucket(), size: 2*n + feedItemBytes}
}

func (f *feed) publish(evs []feedItem, buckets map[uint32]struct{}) {
	if len(evs) == 0 && len(buckets) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, it := range evs {
		f.items = append(f.items, it)
		f.bytes += it.size
	}
	for b := range buckets {
		f.items = append(f.items, feedItem{bucket: b, size: feedItemBytes})
		f.bytes += feedItemBytes
	}
	if f.bytes > f.limit {
		drop := 0
		for ; f.bytes > f.limit/2 && drop < len(f.items); drop++ {
			f.bytes -= f.items[drop].size
		}
		// A new array: the items since handed out stay as they are
		// (items already in an array are never written again).
		f.items = append(make([]feedItem, 0, 2*(len(f.items)-drop)), f.items[drop:]...)
		f.base += uint64(drop)
	}
	close(f.wake)
	f.wake = make(chan struct{})
}

// next returns the sequence number the next item will have, and a channel
// closed when it comes.
func (f *feed) next() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.base + uint64(len(f.items)), f.wake
}

// since returns the items from sequence number seq on (shared: the caller
// must not change them), the number after them, and a channel closed when
// more come; behind reports that some of them are no longer kept.
func (f *feed) since(seq uint64) (items []feedItem, next uint64, wake <-chan struct{}, behind bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next = f.base + uint64(len(f.items))
	if seq < f.base {
		return nil, next, f.wake, true
	}
	return f.items[seq-f.base : len(f.items) : len(f.items)], next, f.wake, false
}
