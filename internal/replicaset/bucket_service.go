package replicaset

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	"github.com/cockroachdb/pebble/v2"
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

// eachTuple calls fn with every tuple of bucket in r, every space, in the
// order of their keys (space id, then key), as a copy sends them, with
// the bytes each takes in storage.
func (s *Storage) eachTuple(r pebble.Reader, bucket uint32, fn func(t *rspb.CopiedTuple, size int) error) error {
	at := s.sm.k.tupleSpaceAt()
	return s.eachTupleRow(r, bucket, func(k, v []byte) error {
		ver, t, err := decodeStored(v)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		space := binary.BigEndian.Uint32(k[at:])
		ct := &rspb.CopiedTuple{SpaceId: space, Key: append([]byte(nil), k[at+4:]...), Version: ver, Tuple: append([]byte(nil), t...)}
		return fn(ct, len(k)+len(v))
	})
}

// eachTupleRow calls fn with the key and stored value of every tuple of
// bucket in r, in key order (both valid during the call).
func (s *Storage) eachTupleRow(r pebble.Reader, bucket uint32, fn func(k, v []byte) error) error {
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
		if err := fn(k, v); err != nil {
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
	start := time.Now()
	snap, err := s.readFrozen(ctx, req.GetBucket(), req.GetGeneration())
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	defer func() {
		if took := time.Since(start); took >= SlowWrite {
			s.log.Warn("slow lookup for a moving bucket's destination", "bucket", req.GetBucket(), "took", took, "keys", len(req.GetKeys()))
		}
	}()
	resp := &rspb.LookupResponse{}
	for _, k := range req.GetKeys() {
		v, err := get(snap, s.sm.k.tuple(req.GetBucket(), k.GetSpaceId(), k.GetKey()))
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
	if resp.Applied, err = s.appliedResult(snap, req.GetBucket(), req.GetRequestId()); err != nil {
		return nil, err
	}
	if resp.Revision, err = s.sm.RevisionOf(snap, req.GetBucket()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return resp, nil
}

// appliedResult returns the result of the write with request id id that
// this member applied to bucket b, read from snap, if it remembers one
// (nil otherwise). On a frozen bucket's snapshot, the ids remembered for
// it are final, and the window is never behind what snap holds.
func (s *Storage) appliedResult(snap pebble.Reader, b uint32, id []byte) (*rspb.BatchResult, error) {
	if len(id) == 0 {
		return nil, nil
	}
	at, ok := s.sm.reqs.find(b, id)
	if !ok || at.bucket != b {
		return nil, nil
	}
	v, err := s.sm.storedResult(snap, b, at.ms, id)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if v == nil {
		return nil, nil // forgotten meanwhile: out of the window
	}
	res := &rspb.BatchResult{}
	if err := res.UnmarshalVT(v); err != nil {
		return nil, status.Errorf(codes.Internal, "the result of request id %x: %v", id, err)
	}
	return res, nil
}

// readFrozen returns a snapshot of this member's state in which the
// bucket is being sent (frozen), for its destination to read, or refuses.
// The record and the tuples come from the one snapshot, so a cleanup
// applied meanwhile (GARBAGE, the tuples deleted) cannot empty a read that
// found the bucket frozen. A member that has applied the freeze
// (SENDING) at the destination's generation holds the bucket's final data:
// every write to it precedes the freeze in the log, none follows it (apply
// refuses them), and generations only grow, so no later move's freeze
// looks the same. It reads its own state then, with no ReadIndex: a
// source leader busy with the copy and its own writes answers at once.
// Without a generation (0), or before this member has applied the freeze,
// it reads the index first (it may lag: a new leader, or the freeze just
// committed). Either way the snapshot is checked.
func (s *Storage) readFrozen(ctx context.Context, bucket uint32, generation uint64) (*pebble.Snapshot, error) {
	if generation == 0 || s.frozen(s.cfg.DB, bucket, generation) != nil {
		if err := s.g.ReadIndex(ctx); err != nil {
			return nil, engineError(err)
		}
	}
	snap := s.cfg.DB.NewSnapshot()
	if err := s.frozen(snap, bucket, generation); err != nil {
		_ = snap.Close()
		return nil, err
	}
	return snap, nil
}

// frozen refuses reads for a destination unless this replicaset is (as r
// has it) sending the bucket (it is frozen: its data is final), at generation
// unless that is 0.
func (s *Storage) frozen(r pebble.Reader, bucket uint32, generation uint64) error {
	st, err := s.sm.BucketStateOf(r, bucket)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if st.GetState() != rspb.BucketState_STATE_SENDING {
		return status.Errorf(codes.FailedPrecondition, "bucket %d is %s on %s, not being sent", bucket, describeRecord(st), s.cfg.ReplicasetID)
	}
	if generation != 0 && st.GetGeneration() != generation {
		return status.Errorf(codes.FailedPrecondition, "bucket %d is %s on %s, not being sent at generation %d", bucket, describeRecord(st), s.cfg.ReplicasetID, generation)
	}
	return nil
}

// LookupRange implements BucketService.
func (b *BucketService) LookupRange(ctx context.Context, req *rspb.LookupRangeRequest) (*rspb.LookupRangeResponse, error) {
	s, err := b.leader(req.GetReplicasetId(), req.GetBucket())
	if err != nil {
		return nil, err
	}
	snap, err := s.readFrozen(ctx, req.GetBucket(), req.GetGeneration())
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	return s.sm.lookupRange(snap, req)
}

// lookupRange answers a LookupRange from r.
func (sm *SM) lookupRange(r pebble.Reader, req *rspb.LookupRangeRequest) (*rspb.LookupRangeResponse, error) {
	limit := int(req.GetLimit())
	if limit <= 0 || limit > MaxRangeLimit {
		limit = MaxRangeLimit
	}
	kr := KeyRange{Lower: req.GetFrom(), Upper: req.GetUntil(), Reverse: req.GetReverse()}
	if len(req.GetAfter()) > 0 {
		if a := afterKey(req.GetAfter()); bytes.Compare(a, kr.Lower) > 0 {
			kr.Lower = a
		}
	}
	ts, more, err := sm.Range(r, req.GetBucket(), req.GetSpaceId(), kr, limit)
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
