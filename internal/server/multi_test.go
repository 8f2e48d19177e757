package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// A Multi sent to an instance that does not hold the bucket: each item is
// answered as its unary call would be (the writes and reads forwarded to
// the holder, the refusals with their details), in order; a Multi over
// the limit is refused naming it.
func TestMultiAnswersEachItemAsItsUnaryCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	addrs, startSecond, c := twoInstances(ctx, t, 10*time.Second)
	startSecond()
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "m", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		return err
	})
	pollOK(t, "a first row", func() error {
		_, err := c.Space("m").Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("one")})
		return err
	})
	// The instance that does not hold key 1's bucket, once both serve.
	var elsewhere, holderAddr string
	pollOK(t, "two replicasets", func() error {
		rt, err := dataClient(t, addrs[0]).GetRouting(ctx, &datav1.GetRoutingRequest{})
		if err != nil {
			return err
		}
		if len(rt.GetReplicasets()) != 2 {
			return status.Errorf(codes.Unavailable, "%d replicasets", len(rt.GetReplicasets()))
		}
		b, err := c.Space("m").Bucket(ctx, tuple.Uint(1))
		if err != nil {
			return err
		}
		var holder string
		for _, br := range rt.GetBuckets() {
			if br.GetFirst() <= b && b <= br.GetLast() {
				holder = br.GetReplicasetId()
			}
		}
		for _, rs := range rt.GetReplicasets() {
			if rs.GetReplicasetId() == holder {
				if rs.GetLeaderAddress() == "" {
					return status.Error(codes.Unavailable, "no leader yet")
				}
				holderAddr = rs.GetLeaderAddress()
				for _, a := range addrs {
					if a != rs.GetLeaderAddress() {
						elsewhere = a
					}
				}
			}
		}
		if elsewhere == "" {
			return status.Errorf(codes.Unavailable, "bucket %d's holder %q not found", b, holder)
		}
		return nil
	})
	key := func(k uint64) []byte { return tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k)}) }
	row := func(k uint64, v string) []byte {
		return tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k), tuple.String(v)})
	}
	write := func(kind datav1.OpKind, t []byte) *datav1.MultiItem {
		return &datav1.MultiItem{Op: &datav1.MultiItem_Write{Write: &datav1.WriteRequest{Ops: []*datav1.Op{{Kind: kind, Space: "m", Tuple: t}}}}}
	}
	get := func(space string, k uint64) *datav1.MultiItem {
		return &datav1.MultiItem{Op: &datav1.MultiItem_Get{Get: &datav1.GetRequest{Space: space, Key: key(k), Mode: datav1.Mode_MODE_RW}}}
	}
	req := &datav1.MultiRequest{Items: []*datav1.MultiItem{
		write(datav1.OpKind_OP_KIND_REPLACE, row(2, "two")),
		get("m", 1),
		get("nope", 1),
		write(datav1.OpKind_OP_KIND_INSERT, row(1, "again")),
		get("m", 99),
		{},
	}}
	dc := dataClient(t, elsewhere)
	// That instance's view of group 0 may not have the space yet.
	pollOK(t, "the space, seen from "+elsewhere, func() error {
		_, err := dc.Get(ctx, &datav1.GetRequest{Space: "m", Key: key(1)})
		return err
	})
	resp, err := dc.Multi(ctx, req)
	if err != nil {
		t.Fatalf("Multi: %v", err)
	}
	rs := resp.GetResults()
	if len(rs) != len(req.GetItems()) {
		t.Fatalf("%d results for %d items", len(rs), len(req.GetItems()))
	}
	if w := rs[0].GetWrite(); w == nil || len(w.GetResults()) != 1 || string(w.GetResults()[0].GetTuple()) != string(row(2, "two")) {
		t.Errorf("item 1 (a replace, forwarded): %v", rs[0])
	}
	if g := rs[1].GetGet(); g == nil || !g.GetFound() || string(g.GetTuple()) != string(row(1, "one")) || !g.GetInfo().GetLeader() {
		t.Errorf("item 2 (a get, forwarded): %v", rs[1])
	}
	if st := status.FromProto(rs[2].GetError()); st.Code() != codes.NotFound || !strings.Contains(st.Message(), `no space "nope"`) {
		t.Errorf("item 3 (a missing space): %v", rs[2])
	}
	st := status.FromProto(rs[3].GetError())
	var refusal *datav1.Refusal
	for _, d := range st.Details() {
		if r, ok := d.(*datav1.Refusal); ok {
			refusal = r
		}
	}
	if st.Code() != codes.AlreadyExists || refusal.GetCode() != datav1.Refusal_CODE_DUPLICATE_KEY {
		t.Errorf("item 4 (a duplicate insert): %v with details %v, want AlreadyExists with a duplicate-key Refusal", st, st.Details())
	}
	if g := rs[4].GetGet(); g == nil || g.GetFound() {
		t.Errorf("item 5 (a key with no row): %v", rs[4])
	}
	if st := status.FromProto(rs[5].GetError()); st.Code() != codes.InvalidArgument {
		t.Errorf("item 6 (empty): %v, want InvalidArgument", rs[5])
	}
	// The same answer as the unary call, to the letter.
	_, uerr := dc.Write(ctx, &datav1.WriteRequest{Ops: []*datav1.Op{{Kind: datav1.OpKind_OP_KIND_INSERT, Space: "m", Tuple: row(1, "again")}}})
	if u := status.Convert(uerr); !proto.Equal(u.Proto(), st.Proto()) {
		t.Errorf("the duplicate insert: unary %v, in a Multi %v", u, st)
	}

	big := &datav1.MultiRequest{}
	for range datav1.MaxMultiItems + 1 {
		big.Items = append(big.Items, get("m", 1))
	}
	if _, err := dc.Multi(ctx, big); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "at most 256 items") {
		t.Errorf("a Multi over the limit: %v, want InvalidArgument naming the limit", err)
	}

	// Sent to an instance that holds some of the keys: the reads it serves
	// itself share one read index (Local.GetMany), the others are
	// forwarded; every answer is the unary call's.
	const n = 20
	for k := uint64(3); k <= n; k++ {
		if _, err := c.Space("m").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.String(strings.Repeat("v", int(k)))}); err != nil {
			t.Fatal(err)
		}
	}
	reads := &datav1.MultiRequest{}
	for k := uint64(1); k <= n+2; k++ { // n+1, n+2: no row
		reads.Items = append(reads.Items, get("m", k))
	}
	ro := get("m", 5)
	ro.GetGet().Mode = datav1.Mode_MODE_RO
	reads.Items = append(reads.Items, get("nope", 1), ro, write(datav1.OpKind_OP_KIND_REPLACE, row(n+10, "w"))) // a key nobody reads here
	for _, at := range []string{holderAddr, elsewhere} {
		resp, err := dataClient(t, at).Multi(ctx, reads)
		if err != nil {
			t.Fatalf("Multi of reads at %s: %v", at, err)
		}
		rs := resp.GetResults()
		for k := uint64(1); k <= n+2; k++ {
			g := rs[k-1].GetGet()
			unary, uerr := dataClient(t, at).Get(ctx, reads.GetItems()[k-1].GetGet())
			switch {
			case g == nil:
				t.Errorf("at %s: k%d: %v", at, k, rs[k-1])
			case uerr != nil || g.GetFound() != unary.GetFound() || string(g.GetTuple()) != string(unary.GetTuple()) || g.GetVersion() != unary.GetVersion():
				t.Errorf("at %s: k%d in a Multi %v, unary %v (%v)", at, k, g, unary, uerr)
			case k > n && g.GetFound(), k >= 3 && k <= n && string(g.GetTuple()) != string(row(k, strings.Repeat("v", int(k)))):
				t.Errorf("at %s: k%d: %v", at, k, g)
			}
		}
		if st := status.FromProto(rs[n+2].GetError()); st.Code() != codes.NotFound {
			t.Errorf("at %s: a read of a missing space: %v", at, rs[n+2])
		}
		if g := rs[n+3].GetGet(); g == nil || string(g.GetTuple()) != string(row(5, "vvvvv")) {
			t.Errorf("at %s: an ro read: %v", at, rs[n+3])
		}
		if w := rs[n+4].GetWrite(); w == nil {
			t.Errorf("at %s: the write: %v", at, rs[n+4])
		}
	}

	// The same calls on a data Stream, in two requests, at either
	// instance: each answered by its id with what the Multi answered
	// (the write's version aside, and a read's ReadInfo: who served it and
	// how stale it was are the moment's).
	for _, at := range []string{holderAddr, elsewhere} {
		want, err := dataClient(t, at).Multi(ctx, reads)
		if err != nil {
			t.Fatal(err)
		}
		st, err := dataClient(t, at).Stream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		items := reads.GetItems()
		for _, part := range [][2]int{{0, 10}, {10, len(items)}} {
			req := &datav1.StreamRequest{}
			for i := part[0]; i < part[1]; i++ {
				req.Calls = append(req.Calls, &datav1.StreamCall{Id: uint64(i) + 100, Item: items[i], TimeoutMs: 10_000})
			}
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
		}
		got := map[uint64]*datav1.MultiResult{}
		for len(got) < len(items) {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("at %s: Stream: %v after %d replies", at, err, len(got))
			}
			for _, r := range resp.GetReplies() {
				if _, dup := got[r.GetId()]; dup {
					t.Errorf("at %s: call %d answered twice", at, r.GetId())
				}
				got[r.GetId()] = r.GetResult()
			}
		}
		_ = st.CloseSend()
		for i, w := range want.GetResults() {
			g := got[uint64(i)+100]
			if ww := w.GetWrite(); ww != nil {
				if g.GetWrite() == nil || len(g.GetWrite().GetResults()) != 1 {
					t.Errorf("at %s: the write on the stream: %v", at, g)
				}
				continue
			}
			for _, r := range []*datav1.MultiResult{g, w} {
				if g := r.GetGet(); g != nil {
					// Who served it and how stale it was are the moment's
					// (buckets move between the two replicasets here).
					g.Info = nil
				}
			}
			if !proto.Equal(g, w) {
				t.Errorf("at %s: call %d on the stream %v, in a Multi %v", at, i+1, g, w)
			}
		}
	}
}
