package replicaset

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/sharding"
)

// Reads of a bucket moving here (R5): what this replicaset has, else what
// the source has, unless the key was deleted here during the move (a
// tombstone). The source is asked at the move's generation and answers
// only once it has frozen the bucket (until then the bucket is served
// there, and a read here is refused), so reading it after this member's
// own read keeps the read linearizable. Once the copy is complete (the
// record's copied mark) the bucket is all here and the source is not asked.

// getMoving reads one key of bucket b, falling back to the source while b
// is receiving.
func (s *Storage) getMoving(ctx context.Context, b uint32, sp *schema.Space, key []byte) (Stored, bool, error) {
	st, found, err := s.getMovingOnce(ctx, b, sp, key)
	if errors.Is(err, errSourceDone) {
		return Stored{}, false, s.sourceNotSending(b, err)
	}
	return st, found, err
}

func (s *Storage) getMovingOnce(ctx context.Context, b uint32, sp *schema.Space, key []byte) (Stored, bool, error) {
	st, found, err := s.sm.Get(s.cfg.DB, b, sp.ID(), key)
	if err != nil {
		return Stored{}, false, status.Error(codes.Internal, err.Error())
	}
	if found {
		return st, true, nil
	}
	rec, err := s.sm.BucketStateOf(s.cfg.DB, b)
	if err != nil {
		return Stored{}, false, status.Error(codes.Internal, err.Error())
	}
	if rec.GetState() != rspb.BucketState_STATE_RECEIVING {
		return Stored{}, false, nil
	}
	if rec.GetCopied() {
		// The copy is complete: this replicaset holds the whole bucket
		// now, but it may have completed after the read above; read again.
		st, found, err := s.sm.Get(s.cfg.DB, b, sp.ID(), key)
		if err != nil {
			return Stored{}, false, status.Error(codes.Internal, err.Error())
		}
		return st, found, nil
	}
	if tomb, err := get(s.cfg.DB, s.sm.k.tombstone(b, sp.ID(), key)); err != nil || tomb != nil {
		return Stored{}, false, err
	}
	batch := &rspb.Batch{Bucket: b, Ops: []*rspb.Op{{SpaceId: sp.ID(), Key: key}}}
	if err := s.prevFacts(ctx, rec, batch); err != nil {
		return Stored{}, false, err
	}
	f := batch.GetOps()[0].GetPrev()
	return Stored{Version: f.GetVersion(), Tuple: f.GetTuple(), Key: key}, f.GetFound(), nil
}

// rangeMoving reads a range of bucket b, merging the source's tuples while
// b is receiving: this replicaset's tuple wins, a tombstone hides the
// source's. It honours kr's bounds and order as SM.Range does.
func (s *Storage) rangeMoving(ctx context.Context, b uint32, sp *schema.Space, kr KeyRange, limit int) ([]Stored, bool, error) {
	out, more, err := s.rangeMovingOnce(ctx, b, sp, kr, limit)
	if errors.Is(err, errSourceDone) {
		return nil, false, s.sourceNotSending(b, err)
	}
	return out, more, err
}

func (s *Storage) rangeMovingOnce(ctx context.Context, b uint32, sp *schema.Space, kr KeyRange, limit int) ([]Stored, bool, error) {
	local, more, err := s.sm.Range(s.cfg.DB, b, sp.ID(), kr, limit)
	if err != nil {
		return nil, false, status.Error(codes.Internal, err.Error())
	}
	rec, err := s.sm.BucketStateOf(s.cfg.DB, b)
	if err != nil {
		return nil, false, status.Error(codes.Internal, err.Error())
	}
	if rec.GetState() != rspb.BucketState_STATE_RECEIVING {
		return local, more, nil
	}
	if rec.GetCopied() {
		// All here now, perhaps only since the read above: read again.
		local, more, err := s.sm.Range(s.cfg.DB, b, sp.ID(), kr, limit)
		if err != nil {
			return nil, false, status.Error(codes.Internal, err.Error())
		}
		return local, more, nil
	}
	var out []Stored
	for round := 0; ; round++ {
		if round > 0 {
			if local, more, err = s.sm.Range(s.cfg.DB, b, sp.ID(), kr, limit-len(out)); err != nil {
				return nil, false, status.Error(codes.Internal, err.Error())
			}
		}
		var resp *rspb.LookupRangeResponse
		err = s.onLeaderOf(ctx, rec.GetPeer(), func(ctx context.Context, c rspb.BucketServiceClient) error {
			var err error
			resp, err = c.LookupRange(ctx, &rspb.LookupRangeRequest{ReplicasetId: rec.GetPeer(), Bucket: b, SpaceId: sp.ID(),
				From: kr.Lower, Until: kr.Upper, Reverse: kr.Reverse, Limit: uint32(limit - len(out)), Generation: rec.GetGeneration()})
			return err
		})
		if err != nil {
			return nil, false, sourceError(b, rec.GetPeer(), err)
		}
		src := resp.GetTuples()
		// Each side read at most what is left of the page; past the last
		// key of a side that has more, the other side's tuples may be
		// interleaved with ones not read yet: merge up to that key only.
		var stop []byte
		if more && len(local) > 0 {
			stop = local[len(local)-1].Key
		}
		if resp.GetMore() && len(src) > 0 {
			if k := src[len(src)-1].GetKey(); stop == nil || kr.before(k, stop) {
				stop = k
			}
		}
		i, j := 0, 0
		for len(out) < limit && (i < len(local) || j < len(src)) {
			useLocal := j >= len(src) || i < len(local) && !kr.before(src[j].GetKey(), local[i].Key)
			var key []byte
			if useLocal {
				key = local[i].Key
			} else {
				key = src[j].GetKey()
			}
			if stop != nil && kr.before(stop, key) {
				break
			}
			if useLocal {
				if j < len(src) && bytes.Equal(local[i].Key, src[j].GetKey()) {
					j++ // this replicaset's tuple wins
				}
				out = append(out, local[i])
				i++
				continue
			}
			t := src[j]
			j++
			if tomb, err := get(s.cfg.DB, s.sm.k.tombstone(b, sp.ID(), t.GetKey())); err != nil {
				return nil, false, status.Error(codes.Internal, err.Error())
			} else if tomb != nil {
				continue
			}
			out = append(out, Stored{Version: t.GetVersion(), Tuple: t.GetTuple(), Key: t.GetKey()})
		}
		if stop == nil {
			// Both sides were read to the range's end.
			return out, i < len(local) || j < len(src), nil
		}
		if len(out) == limit {
			return out, true, nil
		}
		// Tombstones hid some of the source's tuples: read on past stop.
		if kr.Reverse {
			kr.Upper = stop
		} else {
			kr.Lower = afterKey(stop)
		}
	}
}

// CountHeld counts space sp's tuples in the buckets this replicaset
// holds, at one instant of its state (a snapshot), for a cluster-wide
// count (proc.SumHeldCounts): the active buckets and the receiving ones.
// A receiving bucket whose copy is under way counts what this replicaset
// has, plus every tuple of the source that it has neither a tuple nor a
// tombstone of (the merge a read makes). A receiving bucket whose source
// answers that it no longer sends it (the move ended after the snapshot)
// is left out: the cluster-wide sum shows the miss, and counts again.
func (s *Storage) CountHeld(ctx context.Context, sp *schema.Space) (proc.HeldCount, error) {
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	hc, err := s.sm.localCount(snap, sp.ID())
	if err != nil {
		return proc.HeldCount{}, status.Error(codes.Internal, err.Error())
	}
	ac := proc.HeldCount{Tuples: hc.tuples, Buckets: hc.buckets, Digest: hc.digest}
	for _, b := range slices.Sorted(maps.Keys(hc.copying)) {
		n, err := s.countCopying(ctx, snap, b, hc.copying[b], sp)
		if errors.Is(err, errSourceDone) {
			continue
		}
		if err != nil {
			return proc.HeldCount{}, err
		}
		ac.Tuples += n
		ac.Buckets++
		ac.Digest += sharding.BucketDigest(b)
	}
	return ac, nil
}

// countCopying counts the tuples of space sp in bucket b, receiving here
// (st) with its copy under way, as snap and the source hold them.
func (s *Storage) countCopying(ctx context.Context, snap pebble.Reader, b uint32, st *rspb.BucketState, sp *schema.Space) (uint64, error) {
	n, err := s.sm.storedCount(snap, b, sp.ID())
	if err != nil {
		return 0, status.Error(codes.Internal, err.Error())
	}
	var after []byte
	for {
		var resp *rspb.LookupRangeResponse
		err := s.onLeaderOf(ctx, st.GetPeer(), func(ctx context.Context, c rspb.BucketServiceClient) error {
			var err error
			resp, err = c.LookupRange(ctx, &rspb.LookupRangeRequest{ReplicasetId: st.GetPeer(), Bucket: b, SpaceId: sp.ID(), After: after, Limit: MaxRangeLimit,
				Generation: st.GetGeneration()}) // not a later move's source: the snapshot is of this one
			return err
		})
		if err != nil {
			return 0, sourceError(b, st.GetPeer(), err)
		}
		for _, t := range resp.GetTuples() {
			local, err := get(snap, s.sm.k.tuple(b, sp.ID(), t.GetKey()))
			if err == nil && local == nil {
				local, err = get(snap, s.sm.k.tombstone(b, sp.ID(), t.GetKey()))
			}
			if err != nil {
				return 0, status.Error(codes.Internal, err.Error())
			}
			if local == nil {
				n++
			}
		}
		ts := resp.GetTuples()
		if !resp.GetMore() || len(ts) == 0 {
			return n, nil
		}
		after = ts[len(ts)-1].GetKey()
	}
}
