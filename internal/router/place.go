package router

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// bucketOfKey returns the bucket of an encoded key (a tuple of its parts)
// of a space.
func (r *Router) bucketOfKey(space string, key []byte) (uint32, error) {
	sp, ok := r.cfg.GroupZero.Space(space)
	if !ok {
		return 0, noSpace(space)
	}
	k, err := sp.DecodeKey(key)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "space %s: %v", space, err)
	}
	return r.bucketOf(sp, k)
}

func (r *Router) bucketOf(sp *schema.Space, key []tuple.Value) (uint32, error) {
	b, err := sp.BucketOf(key, r.cfg.GroupZero.BucketCount())
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "space %s: %v", sp.Name(), err)
	}
	return b, nil
}

func noSpace(name string) error {
	return status.Errorf(codes.NotFound, "no space %q (shardkit space list shows the spaces)", name)
}

// checkBucket refuses a bucket number outside [1, bucket_count], or says
// to retry while this instance does not know the bucket count yet (group
// 0 not caught up).
func (r *Router) checkBucket(b uint32) error {
	n := r.cfg.GroupZero.BucketCount()
	switch {
	case n == 0:
		return status.Errorf(codes.Unavailable, "this instance does not know the bucket count yet (it has not caught up with group 0); retry")
	case b < 1 || b > n:
		return status.Errorf(codes.InvalidArgument, "bucket %d is outside [1, %d]", b, n)
	}
	return nil
}

// bucketOfWrite returns a write's bucket: its own, or the first op's key's.
func (r *Router) bucketOfWrite(req *datav1.WriteRequest) (uint32, error) {
	if b := req.GetBucket(); b != 0 {
		if err := r.checkBucket(b); err != nil {
			return 0, err
		}
		return b, nil
	}
	if len(req.GetOps()) == 0 {
		return 0, status.Error(codes.InvalidArgument, "a write needs at least one operation")
	}
	op := req.GetOps()[0]
	switch op.GetKind() {
	case datav1.OpKind_OP_KIND_INSERT, datav1.OpKind_OP_KIND_REPLACE, datav1.OpKind_OP_KIND_UPSERT:
		sp, ok := r.cfg.GroupZero.Space(op.GetSpace())
		if !ok {
			return 0, noSpace(op.GetSpace())
		}
		t, err := tuple.DecodeTuple(op.GetTuple())
		if err != nil {
			return 0, status.Errorf(codes.InvalidArgument, "op 1: the tuple: %v", err)
		}
		key, err := sp.KeyOf(t)
		if err != nil {
			return 0, status.Errorf(codes.InvalidArgument, "op 1 (space %s): %v", sp.Name(), err)
		}
		return r.bucketOf(sp, key)
	default:
		return r.bucketOfKey(op.GetSpace(), op.GetKey())
	}
}

// placeGet fills in a read's bucket (from its key) and schema version
// when the caller left them out.
func (r *Router) placeGet(req *datav1.GetRequest) error {
	if req.GetBucket() == 0 {
		b, err := r.bucketOfKey(req.GetSpace(), req.GetKey())
		if err != nil {
			return err
		}
		req.Bucket = b
	}
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.GroupZero.SchemaVersion()
	}
	return nil
}
