package replicaset

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/tuple"
)

// verified fails the test unless VerifyData finds f's data sound.
func (f *fixture) verified(when string) {
	f.t.Helper()
	bad, err := VerifyData(f.db, uint64(f.sm.group))
	if err != nil {
		f.t.Fatalf("%s: VerifyData: %v", when, err)
	}
	if len(bad) > 0 {
		f.t.Fatalf("%s: VerifyData found:\n%s", when, strings.Join(bad, "\n"))
	}
}

// VerifyData finds a move's data sound at every step (tombstones on the
// destination during the copy, nothing left on the source after its
// cleanup), and names the bucket and what is wrong when a count, a
// cleanup, a tombstone or a revision is broken.
func TestVerifyDataFindsEachBrokenRuleOfABucket(t *testing.T) {
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	const b, other = 5, 6
	for _, id := range []string{"a", "b", "c"} {
		src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(1, id, 1))}})
	}
	src.ok(&rspb.Batch{Bucket: other, Ops: []*rspb.Op{insertOp(t, offer(2, "x", 1))}})
	src.verified("before the move")

	src.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "dst")
	dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
	kb := key(t, tuple.Uint(1), tuple.String("b"))
	dst.ok(&rspb.Batch{Bucket: b, PrevGeneration: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: kb, Prev: prevOf(src, b, kb)}}})
	dst.verified("a tombstone during the copy")
	rev, err := src.sm.RevisionOf(src.db, b)
	if err != nil {
		t.Fatal(err)
	}
	dst.apply(&rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: []*rspb.CopyChunk{
		{Bucket: b, Generation: 2, Tuples: src.chunk(b), Revision: rev, Last: true}}}}})
	dst.verified("copied")
	dst.setBucket(b, rspb.BucketState_STATE_ACTIVE, 2, "")
	src.setBucket(b, rspb.BucketState_STATE_GARBAGE, 2, "")
	src.verified("the source after its cleanup")
	dst.verified("the destination after the move")

	k := src.sm.k
	count := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	for _, c := range []struct {
		name string
		f    *fixture
		key  []byte
		val  []byte
		want string
	}{
		{"a count off by one", src, k.count(other, 1), count(2), "bucket 6 (ACTIVE(generation 1, peer \"\")) holds 1 tuples of space 1, but counts 2"},
		{"a count of nothing", dst, k.count(other, 1), count(1), "bucket 6 is no record here, yet holds 0 tuples of space 1 and counts 1"},
		{"a zero count", src, k.count(other, 1), count(0), "bucket 6: the count of space 1 is 0000000000000000 (a count is 8 bytes, never 0)"},
		{"a row left by a cleanup", src, k.tuple(b, 1, kb), encodeStored(1, enc(offer(1, "b", 1))), "bucket 5 is GARBAGE(generation 2, peer \"\") here, yet holds 1 tuples of space 1 and counts 0"},
		{"a tombstone of an active bucket", dst, k.tombstone(b, 1, kb), count(1), "bucket 5 is ACTIVE(generation 2, peer \"\") here, yet holds 1 tombstones"},
		{"a revision left by a cleanup", src, k.revision(b), count(3), "bucket 5 is GARBAGE(generation 2, peer \"\") here, yet has revision 3"},
		{"an event above its revision", src, k.event(other, 9), []byte{}, "bucket 6 (ACTIVE(generation 1, peer \"\")) has an event at revision 9, above its revision 1"},
		{"an event left by a cleanup", src, k.event(b, 1), []byte{}, "bucket 5 is GARBAGE(generation 2, peer \"\") here, yet has events up to revision 1"},
	} {
		batch := c.f.db.NewBatch()
		old, err := get(c.f.db, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := batch.Set(c.key, c.val, nil); err != nil {
			t.Fatal(err)
		}
		if err := batch.Commit(nil); err != nil {
			t.Fatal(err)
		}
		bad, err := VerifyData(c.f.db, uint64(c.f.sm.group))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !slices.Contains(bad, c.want) {
			t.Errorf("%s: VerifyData found %q, want %q among them", c.name, bad, c.want)
		}
		if old == nil {
			err = c.f.db.Delete(c.key, nil)
		} else {
			err = c.f.db.Set(c.key, old, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		c.f.verified("after " + c.name + " was undone")
	}
}

func TestDataGroupsListsEveryReplicasetOfADatabase(t *testing.T) {
	f := newFixture(t)
	f.setup()
	other, err := New(f.db, 9)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.db.Set(other.k.bucket(1), []byte{}, nil); err != nil {
		t.Fatal(err)
	}
	gs, err := DataGroups(f.db)
	if err != nil || !slices.Equal(gs, []uint64{7, 9}) {
		t.Fatalf("DataGroups = %v, %v; want [7 9]", gs, err)
	}
}

// Two members that applied the same entries have one digest of their
// data (storage.Digest of the group's keyspace, as check-data reads it);
// a tuple only one of them holds tells them apart.
func TestDataDigestTellsMembersThatDiverged(t *testing.T) {
	a, b := newFixture(t), newFixture(t)
	for _, f := range []*fixture{a, b} {
		f.setup()
		f.ok(&rspb.Batch{Bucket: 5, Ops: []*rspb.Op{insertOp(t, offer(1, "a", 1))}})
	}
	digest := func(f *fixture) uint64 {
		t.Helper()
		d, err := storage.Digest(f.db, storage.GroupPrefix(storage.PrefixData, uint64(f.sm.group)))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if digest(a) != digest(b) {
		t.Fatal("two members that applied the same entries have different digests")
	}
	if err := b.db.Delete(b.sm.k.tuple(5, 1, key(t, tuple.Uint(1), tuple.String("a"))), nil); err != nil {
		t.Fatal(err)
	}
	if digest(a) == digest(b) {
		t.Fatal("a member that lost a tuple has the digest of one that holds it")
	}
}
