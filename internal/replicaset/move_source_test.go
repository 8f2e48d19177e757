package replicaset

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/proc"
)

// A source that refuses a lookup because it no longer sends the bucket
// (the move completed after this member read RECEIVING) is told apart
// from a source that cannot be reached: the first is a BUCKET_MOVING
// redirect, which the router waits out and retries, reading this member's
// record again (scripts/bench-moves.sh saw writes fail with the source's
// FailedPrecondition), the second is the caller's error.
func TestSourceErrorTellsADoneMoveApart(t *testing.T) {
	done := sourceError(48, "r1", status.Error(codes.FailedPrecondition, `bucket 48 is GARBAGE(generation 2, peer "") on r1, not being sent`))
	if !errors.Is(done, errSourceDone) {
		t.Fatalf("a source past the move: %v, want errSourceDone", done)
	}
	down := sourceError(48, "r1", status.Error(codes.Unavailable, "no leader of replicaset r1 answered"))
	if errors.Is(down, errSourceDone) || status.Code(down) != codes.Unavailable {
		t.Fatalf("an unreachable source: %v (code %v), want Unavailable, not errSourceDone", down, status.Code(down))
	}
}

// sourceZero places replicaset r1's leader at "src".
type sourceZero struct{ GroupZero }

func (sourceZero) Replicaset(string) (string, []string) { return "src", nil }

// lookupConn is a source's BucketService answering Lookup: every key found
// at version 7; it keeps the last request.
type lookupConn struct{ got *rspb.LookupRequest }

func (c *lookupConn) Invoke(_ context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req, ok := args.(*rspb.LookupRequest)
	if !ok || !strings.HasSuffix(method, "/Lookup") {
		return status.Errorf(codes.Unimplemented, "%s", method)
	}
	c.got = req
	resp := reply.(*rspb.LookupResponse)
	for range req.GetKeys() {
		resp.Facts = append(resp.Facts, &rspb.PrevFact{Found: true, Version: 7})
	}
	return nil
}

func (c *lookupConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "no streams")
}

// A write to a receiving bucket asks its source at the move's generation
// (so that a frozen source may answer without a read index) and carries
// that generation with the facts (so that apply refuses them at any
// other): both halves of the rule in TestABucketMovesWithPrevSemantics.
func TestPrevFactsAreOfTheMovesGeneration(t *testing.T) {
	conn := &lookupConn{}
	s := &Storage{cfg: StorageConfig{GroupZero: sourceZero{}, Dial: func(addr string) (grpc.ClientConnInterface, error) {
		if addr != "src" {
			return nil, errors.New("dialled " + addr)
		}
		return conn, nil
	}}}
	rec := &rspb.BucketState{State: rspb.BucketState_STATE_RECEIVING, Generation: 5, Peer: "r1"}
	batch := &rspb.Batch{Bucket: 9, Ops: []*rspb.Op{{SpaceId: 1, Key: []byte("a")}, {SpaceId: 1, Key: []byte("b")}}}
	if err := s.prevFacts(t.Context(), rec, batch); err != nil {
		t.Fatal(err)
	}
	if g := conn.got.GetGeneration(); g != 5 || conn.got.GetReplicasetId() != "r1" || conn.got.GetBucket() != 9 || len(conn.got.GetKeys()) != 2 {
		t.Fatalf("lookup asked %v, want r1's bucket 9 at generation 5, two keys", conn.got)
	}
	if batch.GetPrevGeneration() != 5 {
		t.Fatalf("the batch's prev facts are marked generation %d, want 5", batch.GetPrevGeneration())
	}
	for i, op := range batch.GetOps() {
		if op.GetPrev().GetVersion() != 7 {
			t.Fatalf("op %d: prev %v, want the source's fact", i, op.GetPrev())
		}
	}
}

// A call for a receiving bucket whose source says it does not send it
// (the move not frozen yet, reached by a router whose routing is behind,
// or completed and not yet applied here) ends at once in a BUCKET_MOVING
// redirect, so that the router reads its routing again and goes where the
// bucket is served, or waits the switch out, instead of an error.
func TestASourceNotSendingRedirects(t *testing.T) {
	s := &Storage{cfg: StorageConfig{ReplicasetID: "r2"}}
	err := s.sourceNotSending(48, sourceError(48, "r1", status.Error(codes.FailedPrecondition, `bucket 48 is ACTIVE(generation 1, peer "") on r1, not being sent`)))
	rd := datav1.RedirectOf(err)
	if rd == nil || rd.GetReason() != datav1.Redirect_REASON_BUCKET_MOVING || rd.GetBucket() != 48 {
		t.Fatalf("%v: redirect %v, want BUCKET_MOVING for bucket 48", err, rd)
	}
	for _, want := range []string{"receiving on replicaset r2", "does not serve it yet", "ACTIVE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// A call's arguments over datav1.MaxCallArgsBytes are refused as invalid,
// naming the limit, before the procedure runs (a client other than the Go
// one may send them).
func TestOversizedCallArgumentsAreRefused(t *testing.T) {
	reg, err := proc.NewRegistry(proc.Builtins()...)
	if err != nil {
		t.Fatal(err)
	}
	s := &Storage{cfg: StorageConfig{ReplicasetID: "r1", Procs: reg}}
	_, err = s.Call(t.Context(), &datav1.CallRequest{Procedure: "echo", Args: make([]byte, datav1.MaxCallArgsBytes+1)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "procedure echo: the arguments: a tuple of 1048577 bytes is more than 1048576") {
		t.Fatalf("oversized arguments: %v, want InvalidArgument naming the size and the limit", err)
	}
}
