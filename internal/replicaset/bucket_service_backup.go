package replicaset

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// Backups and restores, the replicaset's side (docs/design/backup.md): a
// backup of a bucket is the chunk stream a move's source sends, read from
// one view of a bucket the replicaset holds; a restore logs those chunks
// into a bucket the new cluster's replicaset holds, as a move's copy does.

// BackupBuckets implements BucketService: after a ReadIndex, from one
// snapshot, each asked bucket the replicaset holds ACTIVE, as SendBuckets
// streams a move's. A bucket in any other state is refused, naming it: a
// SENDING one's writes may go to its destination after the move's switch
// (the source's copy is final at its freeze, not at this call), and a
// RECEIVING one is not whole here; the caller asks again once the move is
// over, wherever the bucket is then. Nothing is frozen or logged.
func (b *BucketService) BackupBuckets(req *rspb.BackupBucketsRequest, stream grpc.ServerStreamingServer[rspb.BackupBucketsResponse]) error {
	if err := checkBatch(len(req.GetBuckets())); err != nil {
		return err
	}
	bases := req.GetBaseRevisions()
	if len(bases) != 0 && len(bases) != len(req.GetBuckets()) {
		return status.Errorf(codes.InvalidArgument, "%d base revisions for %d buckets: want one per bucket, or none", len(bases), len(req.GetBuckets()))
	}
	s, err := b.leader(req.GetReplicasetId(), req.GetBuckets()[0])
	if err != nil {
		return err
	}
	// Every write this replicaset acknowledged before the call is applied
	// here before the view is taken.
	if err := s.readIndex(stream.Context()); err != nil {
		return engineError(err)
	}
	snap := s.cfg.DB.NewSnapshot()
	defer snap.Close()
	// A backup is elastic work, as the copy of moved buckets is: unless
	// asked not to, each part waits for the pace the clients' write delay
	// sets (elasticPace, shared with the copy into this replicaset, which
	// a move may run at the same time; each has its own limiter at that
	// pace), and reading the next waits with it.
	ch := &chunker{limit: int(req.GetChunkTuples()), flush: backupSender(stream.Context(), s.copyPace.elastic, req.GetUnpaced(), stream.Send)}
	asked := map[uint32]bool{}
	for _, bucket := range req.GetBuckets() {
		if asked[bucket] {
			return status.Errorf(codes.InvalidArgument, "bucket %d is named twice", bucket)
		}
		asked[bucket] = true
	}
	// Ids the window holds now and snap does not (remembered after it) are
	// skipped by eachRequest.
	remembered := s.sm.reqs.ofBuckets(asked)
	for i, bucket := range req.GetBuckets() {
		st, err := s.sm.BucketStateOf(snap, bucket)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if st.GetState() != rspb.BucketState_STATE_ACTIVE {
			ch.refuse(bucket, fmt.Sprintf("bucket %d is %s on %s, not active", bucket, describeRecord(st), s.cfg.ReplicasetID))
			continue
		}
		first := &rspb.CopyChunk{Bucket: bucket, Generation: st.GetGeneration()}
		if len(bases) > 0 {
			sent, err := s.chunkChanges(snap, ch, first, remembered[bucket], bases[i])
			if err != nil {
				return err
			}
			if sent {
				continue
			}
		}
		if err := s.chunkBucket(snap, ch, first, remembered[bucket]); err != nil {
			return err
		}
	}
	return ch.send()
}

// chunkChanges streams a bucket's changes since base (its revision in
// the base backup) from snap, in chunks shaped as first, with changes
// set, and reports whether it did. A bucket at the base's revision is one
// last chunk with its revision: unchanged. A bucket whose kept history
// holds the base's revision or one before it (trimming drops only the
// oldest, so it holds every batch after the base) is sent as the keys its
// history names after the base, in key order, each with its tuple in
// snap (in tuples) or none (in deleted), then the request ids it
// remembered after the base, its history after the base, and its
// revision. Any other bucket (its
// history does not reach back; its revision is below the base's, so it is
// another cluster's or was restored since) is not sent: the caller sends
// it whole.
func (s *Storage) chunkChanges(snap pebble.Reader, ch *chunker, first *rspb.CopyChunk, rem remembered, base uint64) (bool, error) {
	bucket := first.GetBucket()
	rev, err := s.sm.RevisionOf(snap, bucket)
	if err != nil {
		return false, status.Error(codes.Internal, err.Error())
	}
	if rev == base {
		first.Changes, first.Revision, first.Last = true, rev, true
		ch.chunks = append(ch.chunks, first)
		ch.size += first.SizeVT()
		return true, nil
	}
	if rev < base || base == 0 {
		return false, nil
	}
	oldest, err := s.sm.OldestEvent(snap, bucket)
	if err != nil {
		return false, status.Error(codes.Internal, err.Error())
	}
	if oldest == 0 || oldest > base {
		return false, nil
	}
	var events [][]byte // as stored, as a move's copy sends them
	written := map[string]*rspb.TupleKey{}
	var bad error
	if _, err := s.sm.EventBytes(snap, bucket, base, func(v []byte) bool {
		ev := &rspb.Event{}
		if err := ev.UnmarshalVT(v); err != nil {
			bad = fmt.Errorf("bucket %d: a stored event after revision %d: %w", bucket, base, err)
			return false
		}
		events = append(events, bytes.Clone(v))
		for _, op := range ev.GetOps() {
			k := string(s.sm.k.tuple(bucket, op.GetSpaceId(), op.GetKey()))
			if written[k] == nil {
				written[k] = &rspb.TupleKey{SpaceId: op.GetSpaceId(), Key: op.GetKey()}
			}
		}
		return true
	}); err != nil || bad != nil {
		return false, status.Error(codes.Internal, cmp.Or(bad, err).Error())
	}
	first.Changes = true
	bc := ch.bucket(first)
	for _, k := range slices.Sorted(maps.Keys(written)) {
		key := written[k]
		v, err := get(snap, []byte(k))
		if err != nil {
			return false, status.Error(codes.Internal, err.Error())
		}
		if v == nil {
			bc.chunk.Deleted = append(bc.chunk.Deleted, key)
			if err := bc.added(len(k), true); err != nil {
				return false, err
			}
			continue
		}
		ver, t, err := decodeStored(v)
		if err != nil {
			return false, status.Error(codes.Internal, err.Error())
		}
		bc.chunk.Tuples = append(bc.chunk.Tuples, &rspb.CopiedTuple{SpaceId: key.GetSpaceId(), Key: key.GetKey(), Version: ver, Tuple: append([]byte(nil), t...)})
		if err := bc.added(len(k)+len(v), true); err != nil {
			return false, err
		}
	}
	// An id whose batch made a revision at or below the base's was
	// remembered before the base's capture, and is in the base (a chain's
	// restore takes the ids of every backup of it); every batch makes a
	// revision, and a bucket's revisions go on across moves and restores.
	if err := s.chunkRequests(snap, bc, rem, rev, base); err != nil {
		return false, err
	}
	for _, v := range events {
		bc.chunk.Events = append(bc.chunk.Events, v)
		if err := bc.added(len(v), false); err != nil {
			return false, err
		}
	}
	bc.chunk.Revision, bc.chunk.Last = rev, true
	return true, nil
}

// backupSender is a backup stream's flush: each part waits for elastic's
// pace (with a limiter of its own) unless unpaced, then goes.
func backupSender(ctx context.Context, elastic *elasticPace, unpaced bool, send func(*rspb.BackupBucketsResponse) error) func(*rspb.SendBucketsResponse) error {
	pace := &copyPace{elastic: elastic}
	return func(part *rspb.SendBucketsResponse) error {
		resp := &rspb.BackupBucketsResponse{Chunks: part.GetChunks(), Refused: part.GetRefused()}
		if !unpaced {
			if err := pace.wait(ctx, resp.SizeVT()); err != nil {
				return err
			}
		}
		return send(resp)
	}
}

// RestoreBuckets implements BucketService: the chunks, each marked
// restore, go in one log entry (CopyChunks), applied by every member as a
// move's copy is, into buckets the replicaset holds ACTIVE.
func (b *BucketService) RestoreBuckets(ctx context.Context, req *rspb.RestoreBucketsRequest) (*rspb.RestoreBucketsResponse, error) {
	chunks := req.GetChunks()
	if len(chunks) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no chunks")
	}
	size := 0
	for i, c := range chunks {
		if !c.GetRestore() {
			return nil, status.Errorf(codes.InvalidArgument, "chunk %d (bucket %d) is not marked restore", i, c.GetBucket())
		}
		size += c.SizeVT()
	}
	if size > 2*MaxChunkBytes {
		return nil, status.Errorf(codes.InvalidArgument, "%d bytes of chunks in one call; at most %d", size, 2*MaxChunkBytes)
	}
	s, err := b.leader(req.GetReplicasetId(), chunks[0].GetBucket())
	if err != nil {
		return nil, err
	}
	// Every space the backup's chunks name must be known here.
	v, _ := s.cfg.GroupZero.Schema()
	if _, err := s.ensureSchema(ctx, v); err != nil {
		return nil, err
	}
	// As a move's copy (ReceiveBuckets), the rows go as tables every
	// member ingests, unless the replicaset copies tuple by tuple.
	cc, _, err := s.checkedCopy(chunks, nil)
	if err != nil {
		return nil, err
	}
	res, err := s.proposeCopy(ctx, cc)
	if err != nil {
		return nil, err
	}
	if len(res.Copies) != len(chunks) {
		return nil, status.Errorf(codes.Internal, "replicaset: %d outcomes of a restore of %d chunks", len(res.Copies), len(chunks))
	}
	resp := &rspb.RestoreBucketsResponse{Refused: make([]string, len(chunks)), Copied: make([]uint64, len(chunks))}
	for i, o := range res.Copies {
		switch {
		case o == nil:
			resp.Refused[i] = "not applied"
		case o.Refused != nil:
			resp.Refused[i] = o.Refused.Error()
		default:
			resp.Copied[i] = uint64(o.Copied)
		}
	}
	return resp, nil
}
