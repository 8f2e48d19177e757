package replicaset

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

var otherSpace = &metapb.Space{Id: 2, Name: "other", ShardingKey: []uint32{0}, PrimaryKey: []uint32{0}, Format: []*metapb.Field{{Name: "id", Type: "unsigned"}}}

// watchOnce runs a Watch until its first response after the initial
// catch-up (or its refusal) and returns what it sent.
func watchOnce(t *testing.T, s *Storage, req *datav1.WatchRequest) ([]*datav1.WatchResponse, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []*datav1.WatchResponse
	err := s.Watch(ctx, req, func(r *datav1.WatchResponse) error {
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

// A bucket's history keeps its last EventHistory revisions: a watch from
// within them gets every event after its revision, in order; one from
// before them is refused as compacted, naming the oldest kept; a bucket
// that is being sent ends with a BucketLeft naming its last revision and
// its destination.
func TestAWatchReadsTheHistoryAndIsRefusedBeforeIt(t *testing.T) {
	f := newFixture(t)
	f.setup()
	const b, writes = 5, EventHistory + 100
	for i := range writes {
		f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, fmt.Sprint(i), 1))}})
	}
	s := &Storage{sm: f.sm, cfg: StorageConfig{ReplicasetID: "r1", DB: f.db}}
	oldest, err := f.sm.OldestEvent(f.db, b)
	if err != nil || oldest < writes-EventHistory-eventTrimEvery || oldest > writes-EventHistory+1 {
		t.Fatalf("the oldest revision kept is %d (%v) after %d writes, want the last %d or up to %d more", oldest, err, writes, EventHistory, eventTrimEvery)
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

// The feed keeps its last items: a reader behind them is told so (it
// reads the database), and the items it was handed before stay as they
// were while the feed trims.
func TestTheFeedTellsAReaderBehindItAndKeepsWhatItHandedOut(t *testing.T) {
	f := newFeed()
	ev := func(rev uint64) []*rspb.Event { return []*rspb.Event{{Bucket: 1, Revision: rev}} }
	f.publish(ev(1), nil)
	held, next, _, behind := f.since(0)
	if behind || next != 1 || len(held) != 1 {
		t.Fatalf("since(0) after one item: %d items, next %d, behind %v", len(held), next, behind)
	}
	for r := uint64(2); r <= feedSize+2; r++ {
		f.publish(ev(r), nil)
	}
	if _, _, _, behind := f.since(0); !behind {
		t.Fatal("a reader at item 0 after the feed trimmed it is not told it is behind")
	}
	if items, _, _, behind := f.since(feedSize + 1); behind || len(items) != 1 || items[0].ev.GetRevision() != feedSize+2 {
		t.Fatalf("since(the last item): %d items (behind %v), want the last", len(items), behind)
	}
	if held[0].ev.GetRevision() != 1 {
		t.Fatalf("an item handed out before the trim became revision %d", held[0].ev.GetRevision())
	}
}
