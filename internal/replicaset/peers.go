package replicaset

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// onLeaderOf runs call on the leader of another replicaset (rspb.OnLeader).
func (s *Storage) onLeaderOf(ctx context.Context, rsID string, call func(context.Context, rspb.BucketServiceClient) error) error {
	leader, members := s.cfg.Zero.Replicaset(rsID)
	return rspb.OnLeader(ctx, s.cfg.Dial, rsID, append([]string{leader}, members...), call)
}

// errSourceDone: the source of a receiving bucket no longer sends it (the
// copy completed, this replicaset made the bucket active, and the source
// cleaned it up, all after this member read RECEIVING): read the local
// record again.
var errSourceDone = errors.New("replicaset: the bucket's source no longer sends it")

// sourceError wraps a failure to read a receiving bucket's source.
func sourceError(b uint32, src string, err error) error {
	if status.Code(err) == codes.FailedPrecondition {
		return fmt.Errorf("bucket %d: %w: %w", b, errSourceDone, err)
	}
	return fmt.Errorf("bucket %d is moving here from %s, which could not be read: %w", b, src, err)
}

// prevFacts reads, on the source of a receiving bucket, what it holds for
// the batch's keys, and marks the batch with the move's generation (the
// facts are of that move's source; apply refuses them at any other).
func (s *Storage) prevFacts(ctx context.Context, st *rspb.BucketState, batch *rspb.Batch) error {
	req := &rspb.LookupRequest{ReplicasetId: st.GetPeer(), Bucket: batch.GetBucket(), Generation: st.GetGeneration()}
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
	batch.PrevGeneration = st.GetGeneration()
	return nil
}
