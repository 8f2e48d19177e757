package replicaset

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// onLeaderOf runs call on the leader of another replicaset: the leader
// group 0 recorded first, then whatever a refusal names, then every
// member, until one serves it (at most a handful of tries).
func (s *Storage) onLeaderOf(ctx context.Context, rsID string, call func(context.Context, rspb.BucketServiceClient) error) error {
	leader, members := s.cfg.Zero.Replicaset(rsID)
	var tried []string
	queue := []string{}
	if leader != "" {
		queue = append(queue, leader)
	}
	queue = append(queue, members...)
	var last error
	for len(queue) > 0 && len(tried) < 2*len(members)+2 {
		addr := queue[0]
		queue = queue[1:]
		if addr == "" || slices.Contains(tried, addr) {
			continue
		}
		tried = append(tried, addr)
		conn, err := s.cfg.Dial(addr)
		if err != nil {
			last = err
			continue
		}
		err = call(ctx, rspb.NewBucketServiceClient(conn))
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		if rd := redirectOf(err); rd != nil {
			if l := rd.GetLeaderAddress(); l != "" && !slices.Contains(tried, l) {
				queue = append([]string{l}, queue...)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable {
			return err
		}
	}
	if last == nil {
		last = errors.New("no member with an address")
	}
	return status.Errorf(codes.Unavailable, "no leader of replicaset %s answered (tried %v): %v", rsID, tried, last)
}

func redirectOf(err error) *datav1.Redirect {
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if rd, ok := d.(*datav1.Redirect); ok {
			return rd
		}
	}
	return nil
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
// the batch's keys.
func (s *Storage) prevFacts(ctx context.Context, st *rspb.BucketState, batch *rspb.Batch) error {
	req := &rspb.LookupRequest{ReplicasetId: st.GetPeer(), Bucket: batch.GetBucket()}
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
	return nil
}
