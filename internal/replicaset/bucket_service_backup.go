package replicaset

import (
	"context"
	"fmt"

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
	ch := &chunker{limit: int(req.GetChunkTuples()), flush: func(chunks []*rspb.CopyChunk, refused []*rspb.BucketRefusal) error {
		return stream.Send(&rspb.BackupBucketsResponse{Chunks: chunks, Refused: refused})
	}}
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
	for _, bucket := range req.GetBuckets() {
		st, err := s.sm.BucketStateOf(snap, bucket)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if st.GetState() != rspb.BucketState_STATE_ACTIVE {
			ch.refuse(bucket, fmt.Sprintf("bucket %d is %s on %s, not active", bucket, describeRecord(st), s.cfg.ReplicasetID))
			continue
		}
		if err := s.chunkBucket(snap, ch, &rspb.CopyChunk{Bucket: bucket, Generation: st.GetGeneration()}, remembered[bucket]); err != nil {
			return err
		}
	}
	return ch.send()
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
	var tables [][]byte
	if s.cfg.CopyTables {
		if tables, err = s.sm.CopyTables(s.cfg.DB, chunks); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	res, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: &rspb.CopyChunks{Chunks: chunks, Tables: tables}}})
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
