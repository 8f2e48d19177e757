package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/tuple"
)

// Mode says who serves a read or a procedure.
type Mode int

const (
	// RW: the replicaset's leader; a read is linearizable. The default.
	RW Mode = iota
	// RO: the nearest replica (Config.FailureDomain); a read may be stale
	// (ReadInfo says how much).
	RO
)

func (m Mode) api() datav1.Mode {
	if m == RO {
		return datav1.Mode_MODE_RO
	}
	return datav1.Mode_MODE_RW
}

// Result is the outcome of one write operation or point read.
type Result struct {
	// Found: a tuple with the key existed (before a write; for a read or a
	// check, now; a check's Result has no Tuple). For an Insert with IfAbsent, Found says that the key
	// existed and nothing was inserted (Tuple is the existing one).
	Found bool
	// Tuple after a write (Insert, Replace, Update, Upsert), the deleted
	// one (Delete), or the one read; nil when there is none.
	Tuple tuple.Tuple
	// Version names the write that made the tuple (its replicaset's Raft
	// group in the top 16 bits, the log index below: unique in the
	// cluster, kept when the bucket moves): after a write, or as read; for
	// Delete, the version it had. IfVersion compares it.
	Version uint64
}

// ReadInfo says who served a read and how fresh it is.
type ReadInfo struct {
	Replicaset string
	Instance   string
	// Leader: linearizable (an rw read on the leader).
	Leader bool
	// AppliedIndex is the serving member's applied index; LagEntries how
	// many committed entries it had not applied; LeaderContact how long
	// since it last heard from its leader (-1: no leader known).
	AppliedIndex  uint64
	LagEntries    uint64
	LeaderContact int64 // ms
}

// Versioned is a tuple with its version.
type Versioned struct {
	Tuple   tuple.Tuple
	Version uint64
}

// Space is a handle on one space; get it with Client.Space. It is cheap
// and safe for concurrent use.
type Space struct {
	c    *Client
	name string
}

// Space returns a handle on the space name (not checked until used).
func (c *Client) Space(name string) *Space { return &Space{c: c, name: name} }

// Name returns the space's name.
func (s *Space) Name() string { return s.name }

// WriteOption tunes one write operation.
type WriteOption func(*datav1.Op)

// IfVersion makes a write conditional (compare-and-set): it applies only
// if the tuple's version is v (0: only if there is no tuple). Otherwise it
// fails with ErrConditionFailed, Error.ActualVersion saying the version.
func IfVersion(v uint64) WriteOption {
	return func(o *datav1.Op) { o.IfVersion = &v }
}

// Insert inserts a tuple; a key that exists is ErrAlreadyExists, or with
// IfAbsent a Result with Found true (nothing inserted).
func (s *Space) Insert(ctx context.Context, t tuple.Tuple, opts ...WriteOption) (Result, error) {
	return s.one(ctx, "insert", &datav1.Op{Kind: datav1.OpKind_OP_KIND_INSERT, Tuple: tuple.AppendTuple(nil, t)}, t, nil, opts...)
}

// Replace inserts a tuple or overwrites the one with its key.
func (s *Space) Replace(ctx context.Context, t tuple.Tuple, opts ...WriteOption) (Result, error) {
	return s.one(ctx, "replace", &datav1.Op{Kind: datav1.OpKind_OP_KIND_REPLACE, Tuple: tuple.AppendTuple(nil, t)}, t, nil, opts...)
}

// Update applies update operations (Tarantool's: =, +, -, !, #, ...) to
// the tuple with key; Found is false (and nothing is written) when there
// is none. The primary key may not change.
func (s *Space) Update(ctx context.Context, key []tuple.Value, ops []tuple.Op, opts ...WriteOption) (Result, error) {
	return s.one(ctx, "update", &datav1.Op{Kind: datav1.OpKind_OP_KIND_UPDATE, Key: tuple.AppendTuple(nil, key), Ops: tuple.AppendOps(nil, ops)}, nil, key, opts...)
}

// Upsert inserts t when no tuple has its key, else applies ops to that one.
func (s *Space) Upsert(ctx context.Context, t tuple.Tuple, ops []tuple.Op, opts ...WriteOption) (Result, error) {
	return s.one(ctx, "upsert", &datav1.Op{Kind: datav1.OpKind_OP_KIND_UPSERT, Tuple: tuple.AppendTuple(nil, t), Ops: tuple.AppendOps(nil, ops)}, t, nil, opts...)
}

// Delete deletes the tuple with key and returns it (Found false when none).
func (s *Space) Delete(ctx context.Context, key []tuple.Value, opts ...WriteOption) (Result, error) {
	return s.one(ctx, "delete", &datav1.Op{Kind: datav1.OpKind_OP_KIND_DELETE, Key: tuple.AppendTuple(nil, key)}, nil, key, opts...)
}

func (s *Space) one(ctx context.Context, what string, op *datav1.Op, t tuple.Tuple, key []tuple.Value, opts ...WriteOption) (Result, error) {
	op.Space = s.name
	for _, o := range opts {
		o(op)
	}
	b := &Batch{c: s.c}
	b.ops = append(b.ops, pendingOp{op: op, space: s.name, tuple: t, key: key})
	res, err := b.do(ctx, what+" in "+s.name)
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// Select reads the tuple with a full primary key. RW (the default) is
// linearizable; RO reads the nearest replica.
func (s *Space) Select(ctx context.Context, key []tuple.Value, mode Mode) (Result, ReadInfo, error) {
	sp, rt, err := s.c.space(ctx, s.name)
	if err != nil {
		return Result{}, ReadInfo{}, err
	}
	b, err := bucketOf(sp, key, rt.bucketCount)
	if err != nil {
		return Result{}, ReadInfo{}, err
	}
	req := &datav1.GetRequest{Space: s.name, Key: tuple.AppendTuple(nil, key), Mode: mode.api(), Bucket: b}
	var resp *datav1.GetResponse
	err = s.c.dataCall(ctx, "select from "+s.name, b, mode == RW, true, func(ctx context.Context, dc datav1.DataServiceClient) error {
		var err error
		resp, err = dc.Get(ctx, req)
		return err
	})
	if err != nil {
		return Result{}, ReadInfo{}, err
	}
	r := Result{Found: resp.GetFound(), Version: resp.GetVersion()}
	if resp.GetFound() {
		if r.Tuple, err = tuple.DecodeTuple(resp.GetTuple()); err != nil {
			return Result{}, ReadInfo{}, &Error{Op: "select from " + s.name, Msg: "a tuple the cluster sent: " + err.Error(), kind: ErrInternal}
		}
	}
	return r, readInfo(resp.GetInfo()), nil
}

func readInfo(i *datav1.ReadInfo) ReadInfo {
	return ReadInfo{Replicaset: i.GetReplicasetId(), Instance: i.GetInstanceId(), Leader: i.GetLeader(),
		AppliedIndex: i.GetAppliedIndex(), LagEntries: i.GetLagEntries(), LeaderContact: i.GetLeaderContactMs()}
}

// Bucket returns the bucket of a primary key of the space.
func (s *Space) Bucket(ctx context.Context, key ...tuple.Value) (uint32, error) {
	sp, rt, err := s.c.space(ctx, s.name)
	if err != nil {
		return 0, err
	}
	return bucketOf(sp, key, rt.bucketCount)
}

// Batch collects write operations on keys of one bucket (any spaces) to
// apply atomically: all or none. Keys share a bucket when their sharding
// keys are equal (every space hashes its sharding key the same way).
type Batch struct {
	c   *Client
	ops []pendingOp
}

type pendingOp struct {
	op    *datav1.Op
	space string
	tuple tuple.Tuple
	key   []tuple.Value
	err   *Error // the op cannot be sent (Do returns it)
}

// Batch starts an atomic batch.
func (c *Client) Batch() *Batch { return &Batch{c: c} }

func (b *Batch) add(kind datav1.OpKind, space string, t tuple.Tuple, key []tuple.Value, ops []tuple.Op, opts []WriteOption) *Batch {
	op := &datav1.Op{Kind: kind, Space: space}
	if t != nil {
		op.Tuple = tuple.AppendTuple(nil, t)
	}
	if key != nil {
		op.Key = tuple.AppendTuple(nil, key)
	}
	if ops != nil {
		op.Ops = tuple.AppendOps(nil, ops)
	}
	for _, o := range opts {
		o(op)
	}
	b.ops = append(b.ops, pendingOp{op: op, space: space, tuple: t, key: key})
	return b
}

// Insert adds an insert to the batch (IfAbsent: skipped when its key
// exists).
func (b *Batch) Insert(space string, t tuple.Tuple, opts ...WriteOption) *Batch {
	return b.add(datav1.OpKind_OP_KIND_INSERT, space, t, nil, nil, opts)
}

// Replace adds a replace.
func (b *Batch) Replace(space string, t tuple.Tuple, opts ...WriteOption) *Batch {
	return b.add(datav1.OpKind_OP_KIND_REPLACE, space, t, nil, nil, opts)
}

// Update adds an update.
func (b *Batch) Update(space string, key []tuple.Value, ops []tuple.Op, opts ...WriteOption) *Batch {
	return b.add(datav1.OpKind_OP_KIND_UPDATE, space, nil, key, ops, opts)
}

// Upsert adds an upsert.
func (b *Batch) Upsert(space string, t tuple.Tuple, ops []tuple.Op, opts ...WriteOption) *Batch {
	return b.add(datav1.OpKind_OP_KIND_UPSERT, space, t, nil, ops, opts)
}

// Delete adds a delete.
func (b *Batch) Delete(space string, key []tuple.Value, opts ...WriteOption) *Batch {
	return b.add(datav1.OpKind_OP_KIND_DELETE, space, nil, key, nil, opts)
}

// Do applies the batch atomically and returns one Result per op. A
// refusal of any op refuses the whole batch (Error.OpIndex names it).
// The batch carries one request id for all its attempts, so a retry
// after an unknown outcome never applies it twice.
func (b *Batch) Do(ctx context.Context) ([]Result, error) { return b.do(ctx, "batch") }

func (b *Batch) do(ctx context.Context, what string) ([]Result, error) {
	if len(b.ops) == 0 {
		return nil, invalidf("%s: no operations", what)
	}
	var bucket uint32
	for i, p := range b.ops {
		if p.err != nil {
			return nil, opError(p.err, i)
		}
		sp, rt, err := b.c.space(ctx, p.space)
		if err != nil {
			return nil, err
		}
		key := p.key
		if key == nil {
			if key, err = keyOf(sp, p.tuple); err != nil {
				return nil, opError(err, i)
			}
		}
		bk, err := bucketOf(sp, key, rt.bucketCount)
		if err != nil {
			return nil, opError(err, i)
		}
		if bucket != 0 && bk != bucket {
			return nil, opError(invalidf("%s: op %d is in bucket %d, op 1 in bucket %d; a batch writes one bucket (give the ops the same sharding key)", what, i+1, bk, bucket), i)
		}
		bucket = bk
	}
	req := &datav1.WriteRequest{Bucket: bucket, RequestId: make([]byte, 16)}
	_, _ = rand.Read(req.RequestId)
	for _, p := range b.ops {
		req.Ops = append(req.Ops, p.op)
	}
	var resp *datav1.WriteResponse
	err := b.c.dataCall(ctx, what, bucket, true, true, func(ctx context.Context, dc datav1.DataServiceClient) error {
		var err error
		resp, err = dc.Write(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	if n := len(resp.GetResults()); n != len(b.ops) {
		// Callers index the results by op: a short answer would panic them.
		// The cluster answered success, so the write may well be applied.
		return nil, &Error{Op: what, Code: codes.Internal, kind: ErrOutcomeUnknown,
			Msg: fmt.Sprintf("the cluster answered %d results to a write of %d ops; the write may have been applied", n, len(b.ops))}
	}
	out := make([]Result, len(resp.GetResults()))
	for i, r := range resp.GetResults() {
		out[i] = Result{Found: r.GetFound(), Version: r.GetVersion()}
		if len(r.GetTuple()) > 0 {
			t, err := tuple.DecodeTuple(r.GetTuple())
			if err != nil {
				return nil, &Error{Op: what, Msg: "a tuple the cluster sent: " + err.Error(), kind: ErrInternal}
			}
			out[i].Tuple = t
		}
	}
	return out, nil
}

func opError(err error, i int) error {
	var e *Error
	if errors.As(err, &e) {
		e.OpIndex = i + 1
		return e
	}
	return fmt.Errorf("op %d: %w", i+1, err)
}
