package robustness

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The resender checks what a client's retry relies on: a write sent
// again with its request id is answered with its first answer, and
// applied once, wherever its bucket went meanwhile. It writes a space of
// its own (resendSpace, keyed as the clients' space, so that its key k is
// in the bucket of the clients' key k and moves with it), with request
// ids it chooses, through the instances' routers, and sends each
// acknowledged write once more 0.2–3 s later. The clients' own retries
// cross a move too rarely to show a request id that did not move with
// its bucket.

const resendSpace = "resends"

var resendSpaceDef = client.SpaceDef{
	Name:       resendSpace,
	Format:     spaceDef.Format,
	PrimaryKey: spaceDef.PrimaryKey,
}

// resendStats is what the resender did and found.
type resendStats struct {
	written, resent, same int
	problems              []string
}

// resentWrite is an acknowledged write and when to send it again.
type resentWrite struct {
	req  *datav1.WriteRequest
	resp *datav1.WriteResponse
	due  time.Time
}

// resend writes keys 1..keys of resendSpace until stop is closed, and
// sends each acknowledged write again once it is due.
func (r *run) resend(ctx context.Context, stop <-chan struct{}) resendStats {
	rng := mrand.New(mrand.NewPCG(r.cfg.seed, 11))
	var st resendStats
	var pending []resentWrite
	send := func(req *datav1.WriteRequest, n int) (*datav1.WriteResponse, error) {
		conn, err := r.c.admin.Conn(r.c.addrs[n%len(r.c.addrs)])
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return datav1.NewDataServiceClient(conn).Write(cctx, req)
	}
	for seq := 0; ; seq++ {
		select {
		case <-stop:
			return st
		case <-time.After(50*time.Millisecond + time.Duration(rng.Int64N(int64(100*time.Millisecond)))):
		}
		for len(pending) > 0 && time.Now().After(pending[0].due) {
			w := pending[0]
			pending = pending[1:]
			resp, err := send(w.req, rng.IntN(len(r.c.addrs)))
			if err != nil {
				continue // no answer: nothing to compare
			}
			st.resent++
			if p := sameAnswer(w.resp, resp); p != "" {
				st.problems = append(st.problems, fmt.Sprintf("%s, request id %x: %s", describeResend(w.req), w.req.GetRequestId(), p))
				continue
			}
			st.same++
		}
		k := 1 + rng.Uint64N(uint64(r.cfg.traffic.keys))
		req := &datav1.WriteRequest{RequestId: make([]byte, 16), Ops: []*datav1.Op{{
			Kind: datav1.OpKind_OP_KIND_REPLACE, Space: resendSpace,
			Tuple: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(k), tuple.String(fmt.Sprintf("r.%d", seq))}),
		}}}
		_, _ = rand.Read(req.RequestId)
		resp, err := send(req, rng.IntN(len(r.c.addrs)))
		if err != nil {
			continue // its outcome is unknown: its second answer may be the first
		}
		st.written++
		due := time.Now().Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(2800*time.Millisecond))))
		i, _ := slices.BinarySearchFunc(pending, due, func(w resentWrite, t time.Time) int { return w.due.Compare(t) })
		pending = slices.Insert(pending, i, resentWrite{req: req, resp: resp, due: due})
	}
}

// sameAnswer says how second, the answer to a write sent again with its
// request id, differs from first, its acknowledged answer ("" when it is
// first's, marked duplicate).
func sameAnswer(first, second *datav1.WriteResponse) string {
	switch {
	case !second.GetDuplicate():
		return fmt.Sprintf("sent again, it was applied again (at index %d, first at %d)", second.GetIndex(), first.GetIndex())
	case second.GetIndex() != first.GetIndex() || !slices.EqualFunc(first.GetResults(), second.GetResults(), func(a, b *datav1.OpResult) bool { return proto.Equal(a, b) }):
		return fmt.Sprintf("sent again, its answer was %v, not the first one, %v", second, first)
	}
	return ""
}

func describeResend(req *datav1.WriteRequest) string {
	t, err := tuple.DecodeTuple(req.GetOps()[0].GetTuple())
	if err != nil {
		return "a write"
	}
	return fmt.Sprintf("replace%v in %s", t, resendSpace)
}
