package cluster

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/storage"
)

// A joiner learns the voters' addresses from the join answer, marked with
// the group-0 commit index the answer was made at (K8). It then replays
// group 0 from the start, so for a while its state machine holds records
// older than that answer: an instance that has moved since shows its old
// address there. The resolver must keep the address from the answer until
// a record written at or after the answer's index replaces it.
func TestAnOlderEntryDoesNotOverwriteAnAddressLearnedAtJoin(t *testing.T) {
	const (
		oldAddr    = "10.0.0.1:3301" // i1's address when the cluster booted
		joinAddr   = "10.0.0.2:3301" // i1's address when the joiner was answered
		newerAddr  = "10.0.0.3:3301" // i1's address after the joiner joined
		joinIndex  = 5               // the commit index the join answer carries
		bootEntry  = 1               // i1's record as written by the Boot command
		laterEntry = 8               // i1's record rewritten after the join
	)
	db, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	sm := meta.New()
	apply := func(index uint64, c *metapb.Command) {
		t.Helper()
		data, err := meta.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		b := db.NewIndexedBatch()
		defer b.Close()
		out, err := sm.Apply(b, []multiraft.Entry{{Index: index, Term: 1, Cmd: data}})
		if err != nil {
			t.Fatal(err)
		}
		if res := out[0].(meta.Result); res.Err != nil {
			t.Fatalf("entry %d refused: %v", index, res.Err)
		}
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	r := newResolver(sm)
	want := func(when, addr string) {
		t.Helper()
		got, err := r.RaftAddress(1)
		if err != nil || got != addr {
			t.Fatalf("%s: RaftAddress(1) = %q, %v; want %q", when, got, err, addr)
		}
	}

	// The joiner is raft_id 3; the answer names i1 (raft_id 1) at joinAddr.
	r.setSelf(3, "10.0.0.9:3301")
	r.setBoot(map[uint64]string{1: joinAddr}, joinIndex)
	want("before any entry is applied", joinAddr)

	// The first entry of group 0 records i1 (raft_id 1) at the address it
	// had then: older than the answer, so the answer's address stays.
	apply(bootEntry, &metapb.Command{Op: &metapb.Command_Boot{Boot: &metapb.Boot{
		Properties: &metapb.ClusterProperties{ClusterId: "c1", ClusterUuid: "cu"},
		First:      &metapb.JoinRequest{ClusterId: "c1", InstanceId: "i1", AdvertiseAddress: oldAddr, Uuid: "uuid-i1"},
	}}})
	if inst := sm.State().InstanceByRaftID(1); inst.GetAddress() != oldAddr || inst.GetCommitIndex() != bootEntry {
		t.Fatalf("after the Boot entry i1's record is %v; want address %s at index %d", inst, oldAddr, bootEntry)
	}
	want("record from an entry older than the answer", joinAddr)

	// An entry after the answer moves i1 again: that record is the newest
	// word on i1's address, so it replaces the answer's.
	apply(laterEntry, &metapb.Command{Op: &metapb.Command_SetAddress{SetAddress: &metapb.SetAddress{InstanceId: "i1", Address: newerAddr}}})
	want("record from an entry newer than the answer", newerAddr)
}
