package replicaset

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A source that refuses a lookup because it no longer sends the bucket
// (the move completed after this member read RECEIVING) is told apart
// from a source that cannot be reached: the first makes the caller read
// its own record again (scripts/bench-moves.sh saw writes fail with the
// source's FailedPrecondition), the second is the caller's error.
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
