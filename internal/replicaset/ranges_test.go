package replicaset

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// bound encodes a bound's parts as a request carries them.
func bound(parts ...tuple.Value) []byte { return tuple.AppendTuple(nil, parts) }

// ids names stored offers "shop:offer".
func ids(t *testing.T, ts []Stored) string {
	t.Helper()
	var out []string
	for _, s := range ts {
		tp, err := tuple.DecodeTuple(s.Tuple)
		if err != nil {
			t.Fatal(err)
		}
		shop, _ := tp[0].AsUint()
		id, _ := tp[1].AsString()
		out = append(out, fmt.Sprintf("%d%s", shop, id))
	}
	return strings.Join(out, " ")
}

// A range within a bucket takes partial-key bounds (prefix, from or after,
// until), in either order, and a limit; each bound is checked against the
// key's leading fields and refused by name.
func TestRangeBoundsAndReverse(t *testing.T) {
	f := newFixture(t)
	f.setup()
	for shop := uint64(1); shop <= 3; shop++ {
		for _, id := range []string{"a", "b", "c", "d"} {
			f.ok(&rspb.Batch{Bucket: 8, Ops: []*rspb.Op{insertOp(t, offer(shop, id, 1))}})
		}
	}
	f.ok(&rspb.Batch{Bucket: 9, Ops: []*rspb.Op{insertOp(t, offer(2, "zz-other-bucket", 1))}})
	sp := f.sm.Schema().ByID(1)
	u, s := tuple.Uint, tuple.String
	for _, c := range []struct {
		name  string
		req   *datav1.RangeRequest
		limit int
		want  string
		more  bool
	}{
		{"prefix", &datav1.RangeRequest{Prefix: bound(u(2))}, 10, "2a 2b 2c 2d", false},
		{"full-key prefix", &datav1.RangeRequest{Prefix: bound(u(2), s("c"))}, 10, "2c", false},
		{"prefix, from and until", &datav1.RangeRequest{Prefix: bound(u(2)), From: bound(u(2), s("b")), Until: bound(u(2), s("d"))}, 10, "2b 2c", false},
		{"partial after skips the prefix", &datav1.RangeRequest{After: bound(u(2))}, 10, "3a 3b 3c 3d", false},
		{"full after", &datav1.RangeRequest{After: bound(u(2), s("c"))}, 3, "2d 3a 3b", true},
		{"partial from", &datav1.RangeRequest{From: bound(u(3))}, 10, "3a 3b 3c 3d", false},
		{"partial until", &datav1.RangeRequest{Until: bound(u(2))}, 10, "1a 1b 1c 1d", false},
		{"until excludes its own key", &datav1.RangeRequest{Until: bound(u(1), s("c"))}, 10, "1a 1b", false},
		{"reverse", &datav1.RangeRequest{Prefix: bound(u(2)), Reverse: true}, 2, "2d 2c", true},
		{"reverse resumed with until", &datav1.RangeRequest{Prefix: bound(u(2)), Until: bound(u(2), s("c")), Reverse: true}, 10, "2b 2a", false},
		{"reverse after", &datav1.RangeRequest{After: bound(u(2)), Reverse: true}, 10, "3d 3c 3b 3a", false},
		{"empty: until before from", &datav1.RangeRequest{From: bound(u(3)), Until: bound(u(2))}, 10, "", false},
		{"empty: prefix outside until", &datav1.RangeRequest{Prefix: bound(u(3)), Until: bound(u(2), s("b"))}, 10, "", false},
	} {
		kr, err := rangeBounds(sp, c.req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, more, err := f.sm.Range(f.db, 8, sp.ID(), kr, c.limit)
		if err != nil || ids(t, got) != c.want || more != c.more {
			t.Errorf("%s: %q more %v (%v), want %q more %v", c.name, ids(t, got), more, err, c.want, c.more)
		}
	}
	for _, c := range []struct {
		req  *datav1.RangeRequest
		want []string
	}{
		{&datav1.RangeRequest{Until: bound(s("x"))}, []string{"until bound", "shop", "expected unsigned"}},
		{&datav1.RangeRequest{Prefix: bound(u(1), u(5))}, []string{"prefix bound", "offer", "expected string"}},
		{&datav1.RangeRequest{From: bound(u(1), s("a"), u(3))}, []string{"from bound has 3 parts", "shop, offer"}},
		{&datav1.RangeRequest{After: bound(tuple.Double(1))}, []string{"after bound", "shop"}},
		{&datav1.RangeRequest{From: bound(u(1)), After: bound(u(1))}, []string{"from (inclusive) or after (exclusive), not both"}},
		{&datav1.RangeRequest{Scan: true, Prefix: bound(u(1))}, []string{"a scan takes no prefix"}},
		{&datav1.RangeRequest{Scan: true, Reverse: true}, []string{"a scan takes no reverse"}},
	} {
		_, err := rangeBounds(sp, c.req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", c.req, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q does not say %q", c.req, err, w)
			}
		}
	}
}

// rangeConn is a source's BucketService answering LookupRange from a
// fixture, as a frozen source does.
type rangeConn struct{ src *fixture }

func (c rangeConn) Invoke(_ context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req, ok := args.(*rspb.LookupRangeRequest)
	if !ok || !strings.HasSuffix(method, "/LookupRange") {
		return status.Errorf(codes.Unimplemented, "%s", method)
	}
	resp, err := c.src.sm.lookupRange(c.src.db, req)
	if err != nil {
		return err
	}
	proto.Merge(reply.(*rspb.LookupRangeResponse), resp)
	return nil
}

func (rangeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams")
}

// A range of a bucket being received merges the source's tuples with this
// replicaset's (its tuple wins, its tombstone hides the source's) within
// the bounds and in the order asked, and pages through it at any limit
// with no tuple missed or repeated, also where tombstones hide a whole
// page of the source's.
func TestRangeOfAReceivingBucketHonoursBoundsAndReverse(t *testing.T) {
	src, dst := newFixture(t), newFixture(t)
	src.setup()
	dst.apply(&rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: 1, Spaces: []*metapb.Space{offersSpace(1)}}}})
	const b = 8
	for shop := uint64(1); shop <= 2; shop++ {
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			src.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(shop, id, 1))}})
		}
	}
	src.setBucket(b, rspb.BucketState_STATE_SENDING, 2, "dst")
	dst.setBucket(b, rspb.BucketState_STATE_RECEIVING, 2, "src")
	u, s := tuple.Uint, tuple.String
	k := func(shop uint64, id string) []byte { return key(t, u(shop), s(id)) }
	for _, id := range []string{"b", "c", "d"} { // a run of tombstones
		dst.ok(&rspb.Batch{Bucket: b, PrevGeneration: 2, Ops: []*rspb.Op{{Kind: rspb.OpKind_OP_KIND_DELETE, SpaceId: 1, Key: k(1, id), Prev: prevOf(src, b, k(1, id))}}})
	}
	rep := &rspb.Op{Kind: rspb.OpKind_OP_KIND_REPLACE, SpaceId: 1, Key: k(2, "a"), Tuple: enc(offer(2, "a", 9)), Prev: prevOf(src, b, k(2, "a"))}
	dst.ok(&rspb.Batch{Bucket: b, PrevGeneration: 2, Ops: []*rspb.Op{rep}})
	ins := insertOp(t, offer(1, "g", 1))
	ins.Prev = prevOf(src, b, k(1, "g"))
	dst.ok(&rspb.Batch{Bucket: b, PrevGeneration: 2, Ops: []*rspb.Op{ins}})

	st := &Storage{sm: dst.sm, cfg: StorageConfig{GroupZero: sourceZero{}, DB: dst.db, Dial: func(string) (grpc.ClientConnInterface, error) {
		return rangeConn{src}, nil
	}}}
	sp := dst.sm.Schema().ByID(1)
	all := []string{"1a", "1e", "1f", "1g", "2a", "2b", "2c", "2d", "2e", "2f"}
	for _, c := range []struct {
		name string
		req  *datav1.RangeRequest
		want []string
	}{
		{"all", &datav1.RangeRequest{}, all},
		{"prefix", &datav1.RangeRequest{Prefix: bound(u(1))}, all[:4]},
		{"after a tombstone", &datav1.RangeRequest{After: bound(u(1), s("b"))}, all[1:]},
		{"from and until", &datav1.RangeRequest{From: bound(u(1), s("f")), Until: bound(u(2), s("c"))}, all[2:6]},
		{"reverse", &datav1.RangeRequest{Reverse: true}, all},
		{"reverse prefix until", &datav1.RangeRequest{Prefix: bound(u(1)), Until: bound(u(1), s("f")), Reverse: true}, all[:2]},
	} {
		kr, err := rangeBounds(sp, c.req)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(c.want)
		if c.req.GetReverse() {
			slices.Reverse(want)
		}
		for limit := 1; limit <= len(all)+1; limit++ {
			var got []Stored
			page := kr
			for pages := 0; ; pages++ {
				ts, more, err := st.rangeMoving(t.Context(), b, sp, page, limit)
				if err != nil {
					t.Fatalf("%s, limit %d: %v", c.name, limit, err)
				}
				if len(ts) > limit || more && len(ts) == 0 || pages > len(all) {
					t.Fatalf("%s, limit %d: a page of %d, more %v", c.name, limit, len(ts), more)
				}
				got = append(got, ts...)
				if !more {
					break
				}
				last := ts[len(ts)-1].Key
				if page.Reverse {
					page.Upper = last
				} else {
					page.Lower = afterKey(last)
				}
			}
			if g := ids(t, got); g != strings.Join(want, " ") {
				t.Fatalf("%s, limit %d: %q, want %q", c.name, limit, g, strings.Join(want, " "))
			}
			for _, x := range got {
				if bytes.Equal(x.Key, k(2, "a")) && !bytes.Equal(x.Tuple, enc(offer(2, "a", 9))) {
					t.Fatalf("%s: 2a is the source's, not this replicaset's", c.name)
				}
			}
		}
	}
}

// A scan's page reads its first bucket past the cursor, then the
// following buckets while they are active here, and says where the next
// page starts: in a bucket past its last key, at a bucket being moved
// (its own page), or nowhere after the space's last bucket.
func TestScanPage(t *testing.T) {
	f := newFixture(t)
	f.setup()
	for _, b := range []uint32{5, 6, 7, 8, 3000} {
		for _, id := range []string{"a", "b"} {
			f.ok(&rspb.Batch{Bucket: b, Ops: []*rspb.Op{insertOp(t, offer(uint64(b), id, 1))}})
		}
	}
	f.setBucket(7, rspb.BucketState_STATE_SENDING, 2, "dst")
	st := &Storage{sm: f.sm, cfg: StorageConfig{DB: f.db}}
	sp := f.sm.Schema().ByID(1)
	page := func(first uint32, after []byte, limit int) string {
		t.Helper()
		resp, err := st.scanPage(t.Context(), &datav1.RangeResponse{}, sp, first, KeyRange{Lower: afterOf(after)}, limit, 3000)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, v := range resp.GetTuples() {
			tp, _ := tuple.DecodeTuple(v.GetTuple())
			id, _ := tp[1].AsString()
			out = append(out, fmt.Sprintf("%d%s", v.GetBucket(), id))
		}
		next := "end"
		if resp.GetMore() {
			next = fmt.Sprint("next ", resp.GetNextBucket())
			if a := resp.GetNextAfter(); len(a) > 0 {
				k, _ := tuple.DecodeTuple(a)
				id, _ := k[1].AsString()
				next += " after " + id
			}
		} else if resp.GetNextBucket() != 0 {
			next = fmt.Sprint("end, but next bucket ", resp.GetNextBucket())
		}
		return strings.Join(out, " ") + "; " + next
	}
	for _, c := range []struct {
		name string
		got  string
		want string
	}{
		{"stops at a bucket being sent", page(5, nil, 100), "5a 5b 6a 6b; next 7"},
		{"full mid-bucket", page(5, nil, 3), "5a 5b 6a; next 6 after a"},
		{"full at a bucket's end", page(5, nil, 4), "5a 5b 6a 6b; next 7"},
		{"after the cursor's key", page(6, key(t, tuple.Uint(6), tuple.String("a")), 100), "6b; next 7"},
		{"a page of the bucket being sent, on to the last", page(7, nil, 100), "7a 7b 8a 8b 3000a 3000b; end"},
		{"the last bucket exactly", page(2999, nil, 2), "3000a 3000b; end"},
		{"the last bucket's end", page(3000, key(t, tuple.Uint(3000), tuple.String("b")), 10), "; end"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
}

// afterOf is the lower bound past key (none for nil), as a cursor's after.
func afterOf(key []byte) []byte {
	if key == nil {
		return nil
	}
	return afterKey(key)
}
