package replicaset

import (
	"context"
	"encoding/binary"
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// CopyChunkTuples is how many tuples one chunk of a bucket's copy carries
// at most (and MaxChunkBytes how many bytes): one log entry of the
// destination each.
const (
	CopyChunkTuples = 1000
	MaxChunkBytes   = 1 << 20
)

// BucketService serves rspb.BucketService for this instance's replicaset
// (whose storage storage returns; nil while there is none).
type BucketService struct {
	rspb.UnimplementedBucketServiceServer
	storage func() *Storage
}

// NewBucketService returns the service over the instance's storage.
func NewBucketService(storage func() *Storage) *BucketService {
	return &BucketService{storage: storage}
}

// leader returns the storage of rsID when this member leads it.
func (b *BucketService) leader(rsID string, bucket uint32) (*Storage, error) {
	s := b.storage()
	if s == nil || s.cfg.ReplicasetID != rsID {
		return nil, status.Errorf(codes.Unavailable, "this instance holds no part of replicaset %s", rsID)
	}
	if !s.IsLeader() {
		return nil, s.notLeader(bucket)
	}
	return s, nil
}

// SetBucket implements BucketService.
func (b *BucketService) SetBucket(ctx context.Context, req *rspb.SetBucketRequest) (*rspb.SetBucketResponse, error) {
	s, err := b.leader(req.GetReplicasetId(), req.GetStep().GetBucket())
	if err != nil {
		return nil, err
	}
	v, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_SetBucket{SetBucket: req.GetStep()}})
	if err != nil {
		return nil, err
	}
	o, ok := v.(*SetBucketOutcome)
	if !ok || o == nil {
		return nil, status.Errorf(codes.Internal, "replicaset: unexpected result %T of a bucket step", v)
	}
	if o.Refused != nil {
		return nil, status.Error(codes.FailedPrecondition, o.Refused.Error())
	}
	if o.Changed {
		s.log.Debug("bucket state", "bucket", req.GetStep().GetBucket(), "record", describeRecord(o.Record))
	}
	return &rspb.SetBucketResponse{Changed: o.Changed, Record: o.Record, DeletedBySpace: o.Deleted}, nil
}

// Receive implements BucketService: the destination's leader pulls the
// bucket from the source's leader, a chunk per log entry.
func (b *BucketService) Receive(ctx context.Context, req *rspb.ReceiveRequest) (*rspb.ReceiveResponse, error) {
	s, err := b.leader(req.GetReplicasetId(), req.GetBucket())
	if err != nil {
		return nil, err
	}
	if _, limit := s.quotas(); !s.receiving.take(1, limit) {
		return nil, status.Errorf(codes.ResourceExhausted, "replicaset %s receives %d buckets already (its quota); retry", s.cfg.ReplicasetID, limit)
	}
	defer s.receiving.give(1)
	st, err := s.sm.BucketStateOf(s.cfg.DB, req.GetBucket())
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if st.GetState() == rspb.BucketState_STATE_ACTIVE && st.GetGeneration() == req.GetGeneration() {
		// The copy completed and the bucket was activated at this
		// generation: a mover that died before recording it asks again.
		return &rspb.ReceiveResponse{CopiedBySpace: map[uint32]uint64{}}, nil
	}
	if st.GetState() != rspb.BucketState_STATE_RECEIVING || st.GetGeneration() != req.GetGeneration() {
		return nil, status.Errorf(codes.FailedPrecondition, "bucket %d is %s on %s, not receiving at generation %d", req.GetBucket(), describeRecord(st), s.cfg.ReplicasetID, req.GetGeneration())
	}
	// The destination must know every space the source may send.
	if _, err := s.ensureSchema(ctx, 0); err != nil {
		v, _ := s.cfg.Zero.Schema()
		if _, err := s.ensureSchema(ctx, v); err != nil {
			return nil, err
		}
	}
	resp := &rspb.ReceiveResponse{CopiedBySpace: map[uint32]uint64{}}
	if st.GetCopied() {
		return resp, nil // copied already (a repeated step)
	}
	chunk := func(ctx context.Context, tuples []*rspb.CopiedTuple, last bool) error {
		v, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_CopyChunk{CopyChunk: &rspb.CopyChunk{
			Bucket: req.GetBucket(), Generation: req.GetGeneration(), Tuples: tuples, Last: last}}})
		if err != nil {
			return err
		}
		o, ok := v.(*CopyOutcome)
		if !ok || o == nil {
			return status.Errorf(codes.Internal, "replicaset: unexpected result %T of a copy", v)
		}
		if o.Refused != nil {
			return status.Error(codes.FailedPrecondition, o.Refused.Error())
		}
		resp.Sent += uint64(len(tuples))
		resp.Copied += uint64(o.Copied)
		for sp, n := range o.BySpace {
			resp.CopiedBySpace[sp] += n
		}
		return nil
	}
	err = s.onLeaderOf(ctx, req.GetFrom(), func(ctx context.Context, c rspb.BucketServiceClient) error {
		stream, err := c.Send(ctx, &rspb.SendRequest{ReplicasetId: req.GetFrom(), Bucket: req.GetBucket(), Generation: req.GetGeneration()})
		if err != nil {
			return err
		}
		for {
			got, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				// Everything is here: the record becomes copied.
				return chunk(ctx, nil, true)
			}
			if err != nil {
				return err
			}
			if err := chunk(ctx, got.GetTuples(), false); err != nil {
				return err
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// Send implements BucketService: the bucket's tuples, every space, from a
// consistent view (the bucket is frozen while it is sent anyway).
func (b *BucketService) Send(req *rspb.SendRequest, stream grpc.ServerStreamingServer[rspb.SendResponse]) error {
	s, err := b.leader(req.GetReplicasetId(), req.GetBucket())
	if err != nil {
		return err
	}
	if limit, _ := s.quotas(); !s.sending.take(1, limit) {
		return status.Errorf(codes.ResourceExhausted, "replicaset %s sends %d buckets already (its quota); retry", s.cfg.ReplicasetID, limit)
	}
	defer s.sending.give(1)
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	st, err := s.sm.BucketStateOf(snap, req.GetBucket())
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if st.GetState() != rspb.BucketState_STATE_SENDING || st.GetGeneration() != req.GetGeneration() {
		return status.Errorf(codes.FailedPrecondition, "bucket %d is %s on %s, not sending at generation %d", req.GetBucket(), describeRecord(st), s.cfg.ReplicasetID, req.GetGeneration())
	}
	limit := int(req.GetChunkTuples())
	if limit <= 0 || limit > CopyChunkTuples {
		limit = CopyChunkTuples
	}
	chunk := &rspb.SendResponse{}
	size := 0
	err = s.eachTuple(snap, req.GetBucket(), func(t *rspb.CopiedTuple, n int) error {
		chunk.Tuples = append(chunk.Tuples, t)
		size += n
		if len(chunk.Tuples) >= limit || size >= MaxChunkBytes {
			if err := stream.Send(chunk); err != nil {
				return err
			}
			chunk, size = &rspb.SendResponse{}, 0
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(chunk.Tuples) > 0 {
		return stream.Send(chunk)
	}
	return nil
}

// eachTuple calls fn with every tuple of bucket in r, every space, in the
// order of their keys (space id, then key), as a copy sends them, with
// the bytes each takes in storage.
func (s *Storage) eachTuple(r pebble.Reader, bucket uint32, fn func(t *rspb.CopiedTuple, size int) error) error {
	prefix := s.sm.k.bucketTuples(bucket)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: storage.PrefixEnd(prefix)})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < len(prefix)+4 {
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		ver, t, err := decodeStored(v)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		space := binary.BigEndian.Uint32(k[len(prefix):])
		ct := &rspb.CopiedTuple{SpaceId: space, Key: append([]byte(nil), k[len(prefix)+4:]...), Version: ver, Tuple: append([]byte(nil), t...)}
		if err := fn(ct, len(k)+len(v)); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// Lookup implements BucketService.
func (b *BucketService) Lookup(ctx context.Context, req *rspb.LookupRequest) (*rspb.LookupResponse, error) {
	s, err := b.leader(req.GetReplicasetId(), req.GetBucket())
	if err != nil {
		return nil, err
	}
	if err := s.g.ReadIndex(ctx); err != nil {
		return nil, engineError(err)
	}
	if err := s.frozen(req.GetBucket()); err != nil {
		return nil, err
	}
	resp := &rspb.LookupResponse{}
	for _, k := range req.GetKeys() {
		v, err := get(s.cfg.DB, s.sm.k.tuple(req.GetBucket(), k.GetSpaceId(), k.GetKey()))
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		f := &rspb.PrevFact{}
		if v != nil {
			ver, t, err := decodeStored(v)
			if err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
			f.Found, f.Version, f.Tuple = true, ver, t
		}
		resp.Facts = append(resp.Facts, f)
	}
	return resp, nil
}

// frozen refuses reads for a destination unless this replicaset is
// sending the bucket (it is frozen: its data is final).
func (s *Storage) frozen(bucket uint32) error {
	st, err := s.sm.BucketStateOf(s.cfg.DB, bucket)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if st.GetState() != rspb.BucketState_STATE_SENDING {
		return status.Errorf(codes.FailedPrecondition, "bucket %d is %s on %s, not being sent", bucket, describeRecord(st), s.cfg.ReplicasetID)
	}
	return nil
}

// LookupRange implements BucketService.
func (b *BucketService) LookupRange(ctx context.Context, req *rspb.LookupRangeRequest) (*rspb.LookupRangeResponse, error) {
	s, err := b.leader(req.GetReplicasetId(), req.GetBucket())
	if err != nil {
		return nil, err
	}
	if err := s.g.ReadIndex(ctx); err != nil {
		return nil, engineError(err)
	}
	if err := s.frozen(req.GetBucket()); err != nil {
		return nil, err
	}
	limit := int(req.GetLimit())
	if limit <= 0 || limit > MaxRangeLimit {
		limit = MaxRangeLimit
	}
	ts, more, err := s.sm.Range(s.cfg.DB, req.GetBucket(), &Space{ID: req.GetSpaceId()}, req.GetAfter(), limit)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	resp := &rspb.LookupRangeResponse{More: more}
	for _, t := range ts {
		resp.Tuples = append(resp.Tuples, &rspb.CopiedTuple{SpaceId: req.GetSpaceId(), Version: t.Version, Tuple: t.Tuple, Key: t.Key})
	}
	return resp, nil
}

// Buckets implements BucketService.
func (b *BucketService) Buckets(_ context.Context, req *rspb.BucketsRequest) (*rspb.BucketsResponse, error) {
	s, err := b.leader(req.GetReplicasetId(), 0)
	if err != nil {
		return nil, err
	}
	all, _, err := s.sm.Buckets(s.cfg.DB)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &rspb.BucketsResponse{Buckets: all, AppliedIndex: s.g.Applied()}, nil
}
