package replicaset

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// Call runs a registered procedure on this member of the replicaset: an
// rw procedure on the leader, after a read index (its reads are
// linearizable, its writes go through the log); an ro procedure on any
// member, reading what it has applied.
func (s *Storage) Call(ctx context.Context, req *datav1.CallRequest) (*datav1.CallResponse, error) {
	p, ok := s.cfg.Procs.Lookup(req.GetProcedure())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no procedure %q on this instance (`shardkit call --list` lists them)", req.GetProcedure())
	}
	if p.Mode == proc.RW && req.GetMode() == datav1.Mode_MODE_RO {
		return nil, status.Errorf(codes.InvalidArgument, "procedure %s writes (rw); call it in mode rw", p.Name)
	}
	if n := len(req.GetArgs()); n > datav1.MaxCallArgsBytes {
		return nil, status.Errorf(codes.InvalidArgument, "procedure %s: the arguments: a tuple of %d bytes is more than %d", p.Name, n, datav1.MaxCallArgsBytes)
	}
	args, err := tuple.DecodeTuple(req.GetArgs())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "procedure %s: the arguments: %v", p.Name, err)
	}
	rw := req.GetMode() != datav1.Mode_MODE_RO
	if rw {
		if !s.IsLeader() {
			return nil, s.notLeader(req.GetBucket())
		}
		if err := s.g.ReadIndex(ctx); err != nil {
			return nil, engineError(err)
		}
	}
	sc, err := s.schemaFor(ctx, req.GetSchemaVersion())
	if err != nil {
		return nil, err
	}
	pc := &procContext{s: s, schema: sc, write: p.Mode == proc.RW, reqID: req.GetRequestId()}
	if len(pc.reqID) == 0 {
		pc.reqID = newRequestID()
	}
	res, err := p.Func(ctx, pc, args)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		// A procedure's own failure is its answer: FailedPrecondition, which
		// clients do not retry (running it again would fail again, and
		// repeat any effect outside its writes).
		return nil, status.Errorf(codes.FailedPrecondition, "procedure %s on replicaset %s failed: %v", p.Name, s.cfg.ReplicasetID, err)
	}
	return &datav1.CallResponse{Result: tuple.AppendTuple(nil, res), ReplicasetId: s.cfg.ReplicasetID}, nil
}

// procContext is a procedure's proc.Context on this member.
type procContext struct {
	s      *Storage
	schema *Schema
	write  bool
	reqID  []byte

	mu     sync.Mutex
	writes uint64 // writes made so far; derives each one's request id
}

func (c *procContext) Replicaset() string { return c.s.cfg.ReplicasetID }

func (c *procContext) space(name string) (*schema.Space, error) {
	sp := c.schema.ByName(name)
	if sp == nil {
		return nil, noSpace(0, name)
	}
	return sp, nil
}

func (c *procContext) Get(space string, key ...tuple.Value) (tuple.Tuple, uint64, bool, error) {
	sp, err := c.space(space)
	if err != nil {
		return nil, 0, false, err
	}
	kb, b, err := c.s.keyOf(sp, tuple.AppendTuple(nil, key), 0)
	if err != nil {
		return nil, 0, false, err
	}
	if err := c.held(b); err != nil {
		return nil, 0, false, err
	}
	st, found, err := c.s.getMoving(context.Background(), b, sp, kb)
	if err != nil || !found {
		return nil, 0, false, err
	}
	t, err := tuple.DecodeTuple(st.Tuple)
	return t, st.Version, err == nil, err
}

// held refuses a bucket this replicaset does not hold.
func (c *procContext) held(b uint32) error {
	st, err := c.s.sm.BucketStateOf(c.s.cfg.DB, b)
	if err != nil {
		return err
	}
	switch st.GetState() {
	case rspb.BucketState_STATE_ACTIVE, rspb.BucketState_STATE_SENDING, rspb.BucketState_STATE_RECEIVING:
		return nil
	}
	return c.s.wrongBucket(b, st)
}

func (c *procContext) Range(space string, bucket uint32, after []tuple.Value, limit int) ([]proc.Versioned, bool, error) {
	sp, err := c.space(space)
	if err != nil {
		return nil, false, err
	}
	if err := c.held(bucket); err != nil {
		return nil, false, err
	}
	var kr KeyRange
	if after != nil {
		a, err := tuple.AppendKey(nil, after...)
		if err != nil {
			return nil, false, err
		}
		kr.Lower = afterKey(a)
	}
	if limit <= 0 || limit > MaxRangeLimit {
		limit = MaxRangeLimit
	}
	ts, more, err := c.s.rangeMoving(context.Background(), bucket, sp, kr, limit)
	if err != nil {
		return nil, false, err
	}
	out := make([]proc.Versioned, 0, len(ts))
	for _, st := range ts {
		t, err := tuple.DecodeTuple(st.Tuple)
		if err != nil {
			return nil, false, err
		}
		out = append(out, proc.Versioned{Tuple: t, Version: st.Version})
	}
	return out, more, nil
}

func (c *procContext) Count(space string) (uint64, error) {
	sp, err := c.space(space)
	if err != nil {
		return 0, err
	}
	return c.s.sm.Count(c.s.cfg.DB, sp.ID())
}

func (c *procContext) CountHeld(ctx context.Context, space string) (proc.HeldCount, error) {
	sp, err := c.space(space)
	if err != nil {
		return proc.HeldCount{}, err
	}
	return c.s.CountHeld(ctx, sp)
}

func (c *procContext) Buckets() ([]uint32, error) {
	all, _, err := c.s.sm.Buckets(c.s.cfg.DB)
	if err != nil {
		return nil, err
	}
	var out []uint32
	for b, st := range all {
		if st.GetState() == rspb.BucketState_STATE_ACTIVE {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Write applies ops through the log like any write. Each write of a call
// gets a request id derived from the call's and its place in the call, so
// a retried call (with the same request id) does not apply them twice.
func (c *procContext) Write(ctx context.Context, ops ...proc.Op) ([]proc.Result, error) {
	if !c.write {
		return nil, proc.ErrReadOnly
	}
	req := make([]*datav1.Op, len(ops))
	for i, op := range ops {
		o, err := encodeProcOp(op)
		if err != nil {
			return nil, fmt.Errorf("op %d: %w", i+1, err)
		}
		req[i] = o
	}
	batch, err := c.s.prepare(c.schema, 0, req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.writes++
	n := c.writes
	c.mu.Unlock()
	h := sha256.New()
	h.Write(c.reqID)
	_ = binary.Write(h, binary.BigEndian, n)
	batch.RequestId = h.Sum(nil)[:requestIDLen]
	batch.SchemaVersion = c.schema.Version
	out, err := c.s.writeBatch(ctx, batch)
	if err != nil {
		return nil, err
	}
	res := make([]proc.Result, len(out.Result.GetResults()))
	for i, r := range out.Result.GetResults() {
		res[i] = proc.Result{Found: r.GetFound(), Version: r.GetVersion()}
		if len(r.GetTuple()) > 0 {
			if res[i].Tuple, err = tuple.DecodeTuple(r.GetTuple()); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

func encodeProcOp(op proc.Op) (*datav1.Op, error) {
	o := &datav1.Op{Space: op.Space, IfVersion: op.IfVersion}
	switch op.Kind {
	case proc.Insert:
		o.Kind = datav1.OpKind_OP_KIND_INSERT
	case proc.Replace:
		o.Kind = datav1.OpKind_OP_KIND_REPLACE
	case proc.Update:
		o.Kind = datav1.OpKind_OP_KIND_UPDATE
	case proc.Upsert:
		o.Kind = datav1.OpKind_OP_KIND_UPSERT
	case proc.Delete:
		o.Kind = datav1.OpKind_OP_KIND_DELETE
	default:
		return nil, errors.New("unknown op kind")
	}
	if op.Tuple != nil {
		o.Tuple = tuple.AppendTuple(nil, op.Tuple)
	}
	if op.Key != nil {
		o.Key = tuple.AppendTuple(nil, op.Key)
	}
	if op.Ops != nil {
		o.Ops = tuple.AppendOps(nil, op.Ops)
	}
	return o, nil
}
