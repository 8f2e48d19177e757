package replicaset

import (
	"bytes"
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// Range reads tuples of one space in one bucket within the request's
// bounds, or a page of a scan of the space (RangeRequest.scan): the
// bucket's tuples past after, then those of the following buckets while
// they are active here, each bucket read at one point (one iterator,
// merged with the source's while it is receiving).
func (s *Storage) Range(ctx context.Context, req *datav1.RangeRequest) (*datav1.RangeResponse, error) {
	sp, err := s.spaceAt(ctx, req.GetSchemaVersion(), req.GetSpace())
	if err != nil {
		return nil, err
	}
	count, _ := s.cfg.GroupZero.Buckets()
	if count == 0 {
		return nil, status.Errorf(codes.Unavailable, "this instance does not know the bucket count yet (it has not caught up with group 0); retry")
	}
	if req.GetBucket() < 1 || req.GetBucket() > count {
		return nil, status.Errorf(codes.InvalidArgument, "bucket %d is outside [1, %d]", req.GetBucket(), count)
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = DefaultRangeLimit
	case limit > MaxRangeLimit:
		return nil, status.Errorf(codes.InvalidArgument, "a range limit of %d is more than %d", limit, MaxRangeLimit)
	}
	kr, err := rangeBounds(sp, req)
	if err != nil {
		return nil, err
	}
	info, err := s.readAt(ctx, req.GetMode(), req.GetBucket())
	if err != nil {
		return nil, err
	}
	resp := &datav1.RangeResponse{Info: info}
	if !req.GetScan() {
		ts, more, err := s.rangeMoving(ctx, req.GetBucket(), sp, kr, limit)
		if err != nil {
			return nil, err
		}
		resp.More = more
		resp.Tuples = make([]*datav1.VersionedTuple, len(ts))
		for i, t := range ts {
			resp.Tuples[i] = &datav1.VersionedTuple{Tuple: t.Tuple, Version: t.Version}
		}
		return resp, nil
	}
	return s.scanPage(ctx, resp, sp, req.GetBucket(), kr, limit, count)
}

// scanPage fills resp with a scan's page: bucket first's tuples within kr,
// then those of the following buckets (of count) while they are active
// here and the page is not full; resp.more and next_* say where the next
// page starts.
func (s *Storage) scanPage(ctx context.Context, resp *datav1.RangeResponse, sp *schema.Space, first uint32, kr KeyRange, limit int, count uint32) (*datav1.RangeResponse, error) {
	for b := first; ; {
		ts, more, err := s.rangeMoving(ctx, b, sp, kr, limit-len(resp.Tuples))
		if err != nil {
			return nil, err
		}
		if b != first && !s.stillHeld(b) {
			// It left during the read (its cleanup deletes its tuples with
			// its record): its own page, routed by it, reads it.
			resp.More, resp.NextBucket = true, b
			return resp, nil
		}
		for _, t := range ts {
			resp.Tuples = append(resp.Tuples, &datav1.VersionedTuple{Tuple: t.Tuple, Version: t.Version, Bucket: b})
		}
		if more {
			last, err := tuple.DecodeKey(ts[len(ts)-1].Key)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "bucket %d: a stored key: %v", b, err)
			}
			resp.More, resp.NextBucket, resp.NextAfter = true, b, tuple.AppendTuple(nil, last)
			return resp, nil
		}
		if b++; b > count {
			resp.More, resp.NextBucket = false, 0 // the space's last bucket is read
			return resp, nil
		}
		resp.More, resp.NextBucket = true, b
		if len(resp.Tuples) == limit || !s.active(b) {
			return resp, nil
		}
		kr = KeyRange{}
	}
}

// active reports whether this member's state has bucket b active here. A
// scan's page goes on only into active buckets: one being moved (sent,
// or received and perhaps not served here yet) starts a page of its own,
// routed by its bucket as a select is, so that the router's checks of a
// moving bucket apply to it too.
func (s *Storage) active(b uint32) bool {
	st, err := s.sm.BucketStateOf(s.cfg.DB, b)
	return err == nil && st.GetState() == rspb.BucketState_STATE_ACTIVE
}

// stillHeld reports whether bucket b, read here as active, still has its
// tuples here: active, or frozen for its move (sending).
func (s *Storage) stillHeld(b uint32) bool {
	st, err := s.sm.BucketStateOf(s.cfg.DB, b)
	return err == nil && (st.GetState() == rspb.BucketState_STATE_ACTIVE || st.GetState() == rspb.BucketState_STATE_SENDING)
}

// rangeBounds checks a range's bounds against the space's key and returns
// them in the key encoding. Refusals name the bound and the field.
func rangeBounds(sp *schema.Space, req *datav1.RangeRequest) (KeyRange, error) {
	if req.GetScan() {
		for _, b := range []struct {
			name string
			set  bool
		}{{"prefix", len(req.GetPrefix()) > 0}, {"from", len(req.GetFrom()) > 0}, {"until", len(req.GetUntil()) > 0}, {"reverse", req.GetReverse()}} {
			if b.set {
				return KeyRange{}, invalid(0, "space %s: a scan takes no %s (it reads the whole space in bucket and key order)", sp.Name(), b.name)
			}
		}
	}
	if len(req.GetFrom()) > 0 && len(req.GetAfter()) > 0 {
		return KeyRange{}, invalid(0, "space %s: a range takes from (inclusive) or after (exclusive), not both", sp.Name())
	}
	kr := KeyRange{Reverse: req.GetReverse()}
	raise := func(k []byte) {
		if bytes.Compare(k, kr.Lower) > 0 {
			kr.Lower = k
		}
	}
	lower := func(k []byte) {
		if len(kr.Upper) == 0 || bytes.Compare(k, kr.Upper) < 0 {
			kr.Upper = k
		}
	}
	for _, b := range []struct {
		name    string
		encoded []byte
		apply   func([]byte)
	}{
		{"prefix", req.GetPrefix(), func(k []byte) { raise(k); lower(afterKey(k)) }},
		{"from", req.GetFrom(), raise},
		{"after", req.GetAfter(), func(k []byte) { raise(afterKey(k)) }},
		{"until", req.GetUntil(), lower},
	} {
		if len(b.encoded) == 0 {
			continue
		}
		k, err := boundKey(sp, b.name, b.encoded)
		if err != nil {
			return KeyRange{}, err
		}
		if k != nil {
			b.apply(k)
		}
	}
	return kr, nil
}

// boundKey checks a bound (the leading parts of a primary key, encoded as
// a tuple) and returns it in the key encoding; nil for no parts.
func boundKey(sp *schema.Space, name string, encoded []byte) ([]byte, error) {
	parts, err := tuple.DecodeTuple(encoded)
	if err != nil {
		return nil, invalid(0, "space %s: the %s bound: %v", sp.Name(), name, err)
	}
	if len(parts) == 0 {
		return nil, nil
	}
	kf := sp.KeyFormat()
	if len(parts) > len(kf) {
		return nil, invalid(0, "space %s: the %s bound has %d parts; the primary key has %d (%s)", sp.Name(), name, len(parts), len(kf), sp.KeyNames())
	}
	if err := kf[:len(parts)].Check(parts); err != nil {
		return nil, invalid(0, "space %s: the %s bound: %v", sp.Name(), name, err)
	}
	k, err := tuple.EncodeKey(parts...)
	if err != nil {
		return nil, invalid(0, "space %s: the %s bound: %v", sp.Name(), name, err)
	}
	return k, nil
}
