package replicaset

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

var otherSpace = &metapb.Space{Id: 2, Name: "other", ShardingKey: []uint32{0}, PrimaryKey: []uint32{0}, Format: []*metapb.Field{{Name: "id", Type: "unsigned"}}}

// watchOnce runs a Watch until its first response after the initial
// catch-up (or its refusal) and returns what it sent.
func watchOnce(t *testing.T, s *Storage, req *datav1.WatchRequest) ([]*datav1.WatchResponse, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []*datav1.WatchResponse
	err := s.Watch(ctx, req, func(e rpccodec.Encoded) error {
		r := &datav1.WatchResponse{}
		if err := r.UnmarshalVT(e); err != nil {
			t.Fatalf("a response that does not decode: %v", err)
		}
		got = append(got, r)
		if len(r.GetEvents()) < watchBatch {
			cancel() // the catch-up's last response
		}
		return nil
	})
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return got, err
}

// A bucket's history keeps its last DefaultHistory.Revisions revisions: a watch from
// within them gets every event after its revision, in order; one from
// before them is refused as compacted, naming the oldest kept; a bucket
// that is being sent ends with a BucketLeft naming its last revision and
// its destination.
func TestAWatchReadsTheHistoryAndIsRefusedBeforeIt(t *testing.T) {
	f := newFixture(t)
	f.setup()
	const b = 5
	kept := uint64(DefaultHistory.Revisions)
	writes := kept + 100
	for i := range writes {
		f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint(i), 1))}})
	}
	s := &Storage{sm: f.sm, cfg: StorageConfig{ReplicasetID: "r1", DB: f.db}}
	oldest, err := f.sm.OldestEvent(f.db, b)
	if err != nil || oldest < writes-kept-eventTrimSlack || oldest > writes-kept+1 {
		t.Fatalf("the oldest revision kept is %d (%v) after %d writes, want the last %d or up to %d more", oldest, err, writes, DefaultHistory.Revisions, eventTrimSlack)
	}
	_, err = watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r1", From: map[uint32]uint64{b: 10}})
	var d *datav1.Compacted
	if st := status.Convert(err); st.Code() == codes.OutOfRange {
		for _, x := range st.Details() {
			d, _ = x.(*datav1.Compacted)
		}
	}
	if d == nil || d.GetOldest() != oldest || d.GetBucket() != b || !strings.Contains(err.Error(), fmt.Sprintf("revision 10 is compacted on replicaset r1: its history starts at revision %d", oldest)) {
		t.Fatalf("a watch from revision 10: %v, want OUT_OF_RANGE with a Compacted detail naming %d", err, oldest)
	}
	got, err := watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r1", From: map[uint32]uint64{b: oldest - 1}})
	if err != nil {
		t.Fatal(err)
	}
	next := oldest
	for _, r := range got {
		for _, ev := range r.GetEvents() {
			if ev.GetRevision() != next || len(ev.GetChanges()) != 1 || ev.GetChanges()[0].GetKind() != datav1.OpKind_OP_KIND_INSERT {
				t.Fatalf("event %+v, want revision %d with one insert", ev, next)
			}
			next++
		}
	}
	if next != writes+1 {
		t.Fatalf("the watch from %d ended at revision %d, want every one to %d", oldest-1, next-1, writes)
	}
	// Another space only: the events come, with no changes.
	f.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 2, Spaces: []*metapb.Space{offersSpace(1), otherSpace}}}})
	got, err = watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r1", Spaces: []string{"other"}, From: map[uint32]uint64{b: writes - 5}})
	if err != nil || len(got) != 1 || len(got[0].GetEvents()) != 5 {
		t.Fatalf("a watch of another space: %v, %v; want the 5 last events", got, err)
	}
	for _, ev := range got[0].GetEvents() {
		if len(ev.GetChanges()) != 0 {
			t.Fatalf("a watch of another space got the changes %v", ev.GetChanges())
		}
	}
	if _, err := watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r1", Spaces: []string{"nope"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `no space "nope"`) {
		t.Fatalf("a watch of an unknown space: %v", err)
	}
	if _, err := watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r9"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a watch of another replicaset: %v, want FAILED_PRECONDITION", err)
	}
	// The bucket is being sent: it ends with a BucketLeft.
	f.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "r2")
	got, err = watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r1", From: map[uint32]uint64{b: writes}, FromNow: []uint32{b + 1}})
	if err != nil || len(got) != 1 || len(got[0].GetLeft()) != 1 {
		t.Fatalf("a watch of a bucket being sent: %v, %v; want one BucketLeft", got, err)
	}
	if l := got[0].GetLeft()[0]; l.GetBucket() != b || l.GetRevision() != writes || l.GetReplicasetId() != "r2" {
		t.Fatalf("BucketLeft %v, want bucket %d at revision %d to r2", l, b, writes)
	}
	if r, ok := got[0].GetStarted()[b+1]; !ok || r != 0 {
		t.Fatalf("started %v, want bucket %d from revision 0 (nothing written to it)", got[0].GetStarted(), b+1)
	}
}

// A watch of many buckets catches up on each from one snapshot: every
// bucket's events after its own revision, in order, none of another
// bucket's; a bucket not here ends with a BucketLeft.
func TestAWatchCatchesUpOnEachOfManyBuckets(t *testing.T) {
	f := newFixture(t)
	f.setup()
	buckets := []uint32{3, 4, 700, 2999} // 700 and 2999: other pages of the cursor
	for i := range 30 {
		for j, b := range buckets {
			if i < 10*j { // bucket 3 gets 30 writes, 4 gets 20, ...; 2999 none
				continue
			}
			f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(uint64(b), fmt.Sprint(i), 1))}})
		}
	}
	s := &Storage{sm: f.sm, cfg: StorageConfig{ReplicasetID: "r1", DB: f.db}}
	from := map[uint32]uint64{2: 0, 3: 5, 4: 0, 700: 9, 2999: 0, 4000: 0}
	got, err := watchOnce(t, s, &datav1.WatchRequest{ReplicasetId: "r1", From: from})
	if err != nil {
		t.Fatal(err)
	}
	next := map[uint32]uint64{}
	for b, r := range from {
		next[b] = r + 1
	}
	var left []uint32
	for _, r := range got {
		for _, ev := range r.GetEvents() {
			b := ev.GetBucket()
			if ev.GetRevision() != next[b] || len(ev.GetChanges()) != 1 {
				t.Fatalf("bucket %d: event at revision %d (%d changes), want %d", b, ev.GetRevision(), len(ev.GetChanges()), next[b])
			}
			next[b]++
		}
		for _, l := range r.GetLeft() {
			left = append(left, l.GetBucket())
		}
	}
	want := map[uint32]uint64{2: 1, 3: 31, 4: 21, 700: 11, 2999: 1, 4000: 1}
	if fmt.Sprint(next) != fmt.Sprint(want) || fmt.Sprint(left) != "[4000]" {
		t.Fatalf("the watch ended at %v with %v left, want %v and bucket 4000 left", next, left, want)
	}
}

// The feed keeps its last items: a reader behind them is told so (it
// reads the database), and the items it was handed before stay as they
// were while the feed trims.
func TestTheFeedTellsAReaderBehindItAndKeepsWhatItHandedOut(t *testing.T) {
	const limit = 10_000
	f := newFeed(limit)
	ev := func(rev uint64) []feedItem {
		e := &rspb.Event{Bucket: 1, Revision: rev}
		return []feedItem{eventItem(e, e.SizeVT())}
	}
	f.publish(ev(1), nil)
	held, next, _, behind := f.since(0)
	if behind || next != 1 || len(held) != 1 {
		t.Fatalf("since(0) after one item: %d items, next %d, behind %v", len(held), next, behind)
	}
	const last = 1000 // items of about 70 bytes: the feed trims several times
	for r := uint64(2); r <= last; r++ {
		f.publish(ev(r), nil)
		if f.bytes > limit {
			t.Fatalf("the feed holds %d bytes after %d items, above its limit %d", f.bytes, r, limit)
		}
	}
	if _, _, _, behind := f.since(0); !behind {
		t.Fatal("a reader at item 0 after the feed trimmed it is not told it is behind")
	}
	if items, _, _, behind := f.since(last - 1); behind || len(items) != 1 || items[0].ev.GetRevision() != last {
		t.Fatalf("since(the last item): %d items (behind %v), want the last", len(items), behind)
	}
	if kept := len(f.items); kept < limit/2/ev(last)[0].size {
		t.Fatalf("the feed keeps %d items (%d bytes), want at least half its limit's worth", kept, f.bytes)
	}
	if held[0].ev.GetRevision() != 1 {
		t.Fatalf("an item handed out before the trim became revision %d", held[0].ev.GetRevision())
	}
}

// A watcher's cursor keeps each bucket's revision apart, across its pages,
// tells a bucket not watched (or dropped) from revision 0, and walks the
// buckets watched in ascending order.
func TestAWatchersCursorKeepsEachBucketApart(t *testing.T) {
	var c bucketRevs
	set := map[uint32]uint64{0: 0, 1: 7, bucketRevsPage - 1: 9, bucketRevsPage: 11, 5 * bucketRevsPage: 13, 1<<20 - 1: 1 << 40}
	for b, rev := range set {
		c.set(b, rev)
	}
	c.set(2, 3)
	c.drop(2)
	c.drop(3 * bucketRevsPage) // a page never made
	for _, b := range []uint32{2, 3, bucketRevsPage + 1, 3 * bucketRevsPage, 1 << 21} {
		if rev, ok := c.get(b); ok {
			t.Fatalf("bucket %d is watched at %d, want not watched", b, rev)
		}
	}
	var order []uint32
	if err := c.each(func(b uint32) error {
		rev, ok := c.get(b)
		if !ok || rev != set[b] {
			t.Fatalf("bucket %d is at %d (%v), want %d", b, rev, ok, set[b])
		}
		order = append(order, b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []uint32{0, 1, bucketRevsPage - 1, bucketRevsPage, 5 * bucketRevsPage, 1<<20 - 1}; fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("each walks %v, want %v", order, want)
	}
}

// keptRevisions is what bucket b's history holds: its revisions and the
// bytes of their records.
func keptRevisions(t *testing.T, f *fixture, b uint32) (revs []uint64, n int) {
	t.Helper()
	it, err := f.db.NewIter(&pebble.IterOptions{LowerBound: f.sm.k.bucketEvents(b), UpperBound: storage.PrefixEnd(f.sm.k.bucketEvents(b))})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		revs = append(revs, binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:]))
		n += len(it.Key()) + len(it.Value())
	}
	return revs, n
}

// The history's limits are set through the log and refused outside their
// bounds, naming the setting; a bucket keeps its newest revisions, at
// most the limit's (plus the slack trimmed at once), at most its bytes
// (plus an eighth), always its newest; and what is kept does not depend
// on when a member restarted (every member keeps the same).
func TestAHistoryKeepsWithinItsLimits(t *testing.T) {
	for _, bad := range []struct {
		c    *rspb.SetHistory
		want string
	}{
		{&rspb.SetHistory{Revisions: 3, Bytes: 1 << 20}, "history revisions 3: want 16 to"},
		{&rspb.SetHistory{Revisions: 100, Bytes: 1000}, "history bytes 1000: want at least 65536"},
	} {
		f := newFixture(t)
		if r := f.apply(&rspb.Command{Op: &rspb.Command_SetHistory{SetHistory: bad.c}}); r[0].Err == nil || !strings.Contains(r[0].Err.Error(), bad.want) {
			t.Fatalf("SetHistory %v: %v, want a refusal with %q", bad.c, r[0].Err, bad.want)
		}
	}
	lim := HistoryLimits{Revisions: 20, Bytes: 64 << 10}
	run := func(restartEvery int) (revs []uint64, n int) {
		f := newFixture(t)
		f.setup()
		f.apply(&rspb.Command{Op: &rspb.Command_SetHistory{SetHistory: &rspb.SetHistory{Revisions: lim.Revisions, Bytes: lim.Bytes}}})
		const b = 9
		for i := range 600 {
			size := 10
			if i >= 300 && i%3 == 0 {
				size = 5000 // the bytes' limit takes over
			}
			f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint(i, strings.Repeat("x", size)), 1))}})
			if restartEvery > 0 && i%restartEvery == restartEvery-1 {
				f.reopen()
				if got := f.sm.History(); got != lim {
					t.Fatalf("after a restart the limits are %+v, want %+v", got, lim)
				}
			}
			revs, n = keptRevisions(t, f, b)
			if len(revs) == 0 || revs[len(revs)-1] != uint64(i+1) {
				t.Fatalf("after %d writes the history holds %v, not the newest", i+1, revs)
			}
			if len(revs) > int(lim.Revisions)+eventTrimSlack || uint64(n) > lim.Bytes+lim.Bytes/8 {
				t.Fatalf("after %d writes the history holds %d revisions of %d bytes, above %+v and its slack", i+1, len(revs), n, lim)
			}
			if i == 299 && len(revs) < int(lim.Revisions) {
				t.Fatalf("after 300 small writes the history holds %d revisions, below its limit %d", len(revs), lim.Revisions)
			}
		}
		return revs, n
	}
	revs, n := run(0)
	if uint64(n) < lim.Bytes/2 {
		t.Fatalf("the history of large writes holds %d bytes (%d revisions), trimmed far below its limit %d", n, len(revs), lim.Bytes)
	}
	if again, _ := run(7); fmt.Sprint(again) != fmt.Sprint(revs) {
		t.Fatalf("with restarts the history holds %v, without %v", again, revs)
	}
}

// A watcher that cannot send (its consumer stalls) holds back neither
// writes nor the feed; once it sends again, behind what the feed still
// keeps, it catches up on every bucket from the database: every event,
// each bucket's in revision order, none twice.
func TestAWatcherBehindTheFeedCatchesUpFromTheDatabase(t *testing.T) {
	f := newFixture(t)
	f.setup()
	f.sm.feed = newFeed(4096) // a few dozen events
	s := &Storage{sm: f.sm, cfg: StorageConfig{ReplicasetID: "r1", DB: f.db}}
	const buckets, writes = 10, 300
	from := map[uint32]uint64{}
	for b := uint32(1); b <= buckets; b++ {
		from[b] = 0
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var mu sync.Mutex
	got := map[uint32][]uint64{}
	total := 0
	sends := 0
	stalled, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Watch(ctx, &datav1.WatchRequest{ReplicasetId: "r1", From: from}, func(e rpccodec.Encoded) error {
			r := &datav1.WatchResponse{}
			if err := r.UnmarshalVT(e); err != nil {
				return err
			}
			mu.Lock()
			for _, ev := range r.GetEvents() {
				got[ev.GetBucket()] = append(got[ev.GetBucket()], ev.GetRevision())
				total++
			}
			sends++
			n := sends
			mu.Unlock()
			if n == 2 { // the first event's response: the consumer stalls
				close(stalled)
				<-release
			}
			return nil
		})
	}()
	write := func(i int) {
		f.ok(&rspb.Batch{Bucket: uint32(i%buckets) + 1, Ops: []*rspb.Op{insertOp(t, offer(uint64(i%buckets)+1, fmt.Sprint(i), 1))}})
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 30 s for %s", what)
			}
			select {
			case err := <-done:
				t.Fatalf("the watch ended: %v", err)
			default:
			}
		}
	}
	waitFor("the first, empty response", func() bool { mu.Lock(); defer mu.Unlock(); return sends == 1 })
	write(0)
	<-stalled
	for i := 1; i < writes; i++ {
		write(i)
	}
	f.sm.feed.mu.Lock()
	base := f.sm.feed.base
	f.sm.feed.mu.Unlock()
	if base < 2 {
		t.Fatalf("the feed still keeps every item (base %d): the watcher is not behind it", base)
	}
	close(release)
	waitFor("every event", func() bool { mu.Lock(); defer mu.Unlock(); return total >= writes })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the watch ended with %v, want its context's end", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for b := uint32(1); b <= buckets; b++ {
		revs := got[b]
		if len(revs) != writes/buckets {
			t.Fatalf("bucket %d: %d events, want %d", b, len(revs), writes/buckets)
		}
		for i, r := range revs {
			if r != uint64(i+1) {
				t.Fatalf("bucket %d: revisions %v, want 1 to %d in order", b, revs, writes/buckets)
			}
		}
	}
}
