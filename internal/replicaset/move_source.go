package replicaset

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rsclient"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// onLeaderOf runs call on the leader of another replicaset (rsclient.OnLeader).
func (s *Storage) onLeaderOf(ctx context.Context, rsID string, call func(context.Context, rspb.BucketServiceClient) error) error {
	leader, members := s.cfg.GroupZero.Replicaset(rsID)
	return rsclient.OnLeader(ctx, s.cfg.Dial, rsID, append([]string{leader}, members...), call)
}

// errSourceDone: the source of a receiving bucket does not send it at the
// move's generation: no longer (the copy completed, this replicaset made
// the bucket active, and the source cleaned it up, all after this member
// read RECEIVING: once this member applies that, its record says ACTIVE),
// or not yet (the mover
// prepares the destination before it freezes the source, and a caller
// whose routing is behind reached this replicaset in between: the bucket
// is served at the source, see sourceNotSending).
var errSourceDone = errors.New("replicaset: the bucket's source does not send it")

// sourceNotSending is the answer to a call for receiving bucket b whose
// source refused (errSourceDone, err) while this member's record is
// RECEIVING: the bucket is in its move's switch as this member sees it (it
// is served at the source until the switch, and here once this member has
// applied its end), so it is a BUCKET_MOVING redirect, answered at once:
// the router reads its routing again and waits the switch out (package
// retry), instead of failing.
func (s *Storage) sourceNotSending(b uint32, err error) error {
	return Redirect(datav1.Redirect_REASON_BUCKET_MOVING, b, "", "",
		fmt.Sprintf("bucket %d is receiving on replicaset %s, which does not serve it yet: %v", b, s.cfg.ReplicasetID, err))
}

// sourceError wraps a failure to read a receiving bucket's source.
func sourceError(b uint32, src string, err error) error {
	if status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("bucket %d: %w: %w", b, errSourceDone, err)
	}
	return fmt.Errorf("bucket %d is moving here from %s, which could not be read: %w", b, src, err)
}

// prevFacts reads, on the source of a receiving bucket, what it holds for
// the batch's keys and whether it applied the batch's request id, and
// marks the batch with the move's generation (the facts are of that
// move's source; apply refuses them at any other).
func (s *Storage) prevFacts(ctx context.Context, st *rspb.BucketState, batch *rspb.Batch) error {
	req := &rspb.LookupRequest{ReplicasetId: st.GetPeer(), Bucket: batch.GetBucket(), Generation: st.GetGeneration(), RequestId: batch.GetRequestId()}
	for _, op := range batch.GetOps() {
		req.Keys = append(req.Keys, &rspb.LookupKey{SpaceId: op.GetSpaceId(), Key: op.GetKey()})
	}
	var resp *rspb.LookupResponse
	err := s.onLeaderOf(ctx, st.GetPeer(), func(ctx context.Context, c rspb.BucketServiceClient) error {
		var err error
		resp, err = c.Lookup(ctx, req)
		return err
	})
	if err != nil {
		return sourceError(batch.GetBucket(), st.GetPeer(), err)
	}
	if len(resp.GetFacts()) != len(batch.GetOps()) {
		return status.Errorf(codes.Internal, "the source %s answered %d facts for %d keys", st.GetPeer(), len(resp.GetFacts()), len(batch.GetOps()))
	}
	for i, op := range batch.GetOps() {
		op.Prev = resp.GetFacts()[i]
	}
	// The source applied this very write before its freeze (a retry of a
	// write whose answer was lost): apply on this side remembers its
	// answer and applies nothing.
	batch.SourceResult = resp.GetApplied()
	batch.PrevRevision = resp.GetRevision()
	batch.PrevGeneration = st.GetGeneration()
	return nil
}
