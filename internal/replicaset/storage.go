package replicaset

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// Limits of what one write may carry.
const (
	// MaxTupleBytes bounds one encoded tuple.
	MaxTupleBytes = 1 << 20
	// MaxKeyBytes bounds one encoded primary key, in writes and in reads
	// by key alike (tuple.EncodeKey).
	MaxKeyBytes = tuple.MaxKeyBytes
	// MaxBatchOps bounds the operations of one write (or one batch).
	MaxBatchOps = 1000
	// MaxBatchBytes bounds the encoded size of one write.
	MaxBatchBytes = 4 << 20
	// DefaultRangeLimit and MaxRangeLimit bound a range read.
	DefaultRangeLimit = 1000
	MaxRangeLimit     = 10000
)

// GroupZero is what the storage needs to know of group 0, the cluster's
// metadata log (the server adapts internal/meta to it).
type GroupZero interface {
	// Schema returns group 0's schema version and spaces.
	Schema() (version uint64, spaces []*metapb.Space)
	// WaitSchema returns once this instance has applied group 0 at least
	// up to schema version v, or when ctx ends.
	WaitSchema(ctx context.Context, v uint64) error
	// Buckets returns the cluster's bucket count and the replicaset that
	// got every bucket at their bootstrap ("" before it).
	Buckets() (count uint32, bootstrap string)
	// Address returns the address of the instance with a raft id ("" when
	// unknown).
	Address(raftID uint64) string
	// Changed returns a channel closed at the next change of group 0.
	Changed() <-chan struct{}
	// Replicaset returns the addresses of a replicaset's leader (as group
	// 0 last recorded it; "" when none) and of its members.
	Replicaset(id string) (leader string, members []string)
}

// StorageConfig configures a Storage.
type StorageConfig struct {
	ReplicasetID string
	InstanceID   string
	Group        *multiraft.Group
	SM           *SM
	DB           *pebble.DB
	GroupZero    GroupZero
	Procs        *proc.Registry
	// Dial returns a connection to another instance (kept by the caller).
	Dial func(addr string) (grpc.ClientConnInterface, error)
	// Quotas returns how many buckets this replicaset may send and
	// receive at once (the cluster's rebalancer settings, read at each
	// copy); nil: MaxSending and MaxReceiving.
	Quotas func() (maxSending, maxReceiving int)
	// MaxSending and MaxReceiving are the quotas without Quotas (defaults
	// 100 and 100, the rebalancer's).
	MaxSending, MaxReceiving int
	// CopyRate returns how many bytes of tuples per second this
	// replicaset copies in while it receives buckets (the rebalancer's
	// copy rate, read before each chunk); nil or 0: no limit.
	CopyRate func() uint64
	// CopyPaceOff returns whether the copy in runs without pacing itself
	// from the clients' writes (the rebalancer's `--copy-pace off`):
	// CopyRate alone bounds it. nil: it paces itself.
	CopyPaceOff func() bool
	// CopyTables makes the copy in log its tuples and history as tables
	// (CopyChunks.tables), written by the source (asked with
	// SendBucketsRequest.table_group) or by this leader, which every
	// member ingests whole, instead of
	// tuples (CopyChunk.tuples) and events, which every member applies
	// one by one (docs/design/moves.md, "The copy as files"). A server
	// sets it unless run with --copy-tables=false. Every member applies
	// the tables of a leader that has it on, whatever its own setting.
	CopyTables bool
	// History bounds every bucket's change history; this member
	// proposes it while it leads the replicaset (zero: DefaultHistory).
	History HistoryLimits
	// Now tells the time (default time.Now): it stamps proposals.
	Now    func() time.Time
	Logger *slog.Logger
}

// Storage is the storage side of one replicaset on this instance (vshard's
// storage): it executes what the router sends it, on this member, and
// refuses with a redirect what another member must do. Writes and rw
// reads need this member to lead the group; ro reads any member.
type Storage struct {
	cfg  StorageConfig
	sm   *SM
	g    *multiraft.Group
	self multiraft.NodeID
	log  *slog.Logger

	schemaMu sync.Mutex // one schema sync at a time

	// Buckets being sent and received now, against the quotas.
	sending, receiving quota
	// The pace of the copy in: elastic's, within CopyRate.
	copyPace copyPace
	// The clients' writes' delay on this member while it leads, which
	// the copy's pace watches.
	writeDelay writeDelay
	// copyInLog counts the copy's entries in this replicaset's log, for writeDelay.
	copyInLog copyInLog
}

// quota counts buckets in flight against a limit read at each take.
type quota struct {
	mu   sync.Mutex
	used int
}

// take counts n more buckets when they fit under limit (or when none are
// in flight: a batch larger than the whole quota goes alone).
func (q *quota) take(n, limit int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.used > 0 && q.used+n > limit {
		return false
	}
	q.used += n
	return true
}

func (q *quota) give(n int) {
	q.mu.Lock()
	q.used -= n
	q.mu.Unlock()
}

// quotas returns the send and receive quotas now.
func (s *Storage) quotas() (maxSending, maxReceiving int) {
	if s.cfg.Quotas != nil {
		return s.cfg.Quotas()
	}
	return s.cfg.MaxSending, s.cfg.MaxReceiving
}

// NewStorage makes the storage of a replicaset group open on this instance.
func NewStorage(cfg StorageConfig) *Storage {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxSending <= 0 {
		cfg.MaxSending = 100
	}
	if cfg.MaxReceiving <= 0 {
		cfg.MaxReceiving = 100
	}
	s := &Storage{cfg: cfg, sm: cfg.SM, g: cfg.Group, self: cfg.Group.Status().Node, log: cfg.Logger.With("replicaset", cfg.ReplicasetID)}
	s.copyPace = copyPace{rate: cfg.CopyRate, off: cfg.CopyPaceOff, elastic: newElasticPace(&s.writeDelay, nil)}
	s.copyPace.elastic.log = s.log
	return s
}

// CopyPace reports the pace of the copy into this replicaset now (on its
// leader, which copies) and the signal it is set from.
func (s *Storage) CopyPace() PaceState {
	bound := s.copyPace.bound()
	if s.copyPace.isOff() {
		return PaceState{BytesPerS: bound, Off: true}
	}
	return s.copyPace.elastic.state(bound)
}

// ReplicasetID names the replicaset.
func (s *Storage) ReplicasetID() string { return s.cfg.ReplicasetID }

// SM returns the replicaset's state machine.
func (s *Storage) SM() *SM { return s.sm }

// IsLeader reports whether this member leads the replicaset's group.
func (s *Storage) IsLeader() bool {
	return s.g.Leader() == s.self
}

// LeaderAddress returns the address of the group's leader as this member
// knows it ("" when none).
func (s *Storage) LeaderAddress() string {
	l := s.g.Leader()
	if l == 0 {
		return ""
	}
	return s.cfg.GroupZero.Address(uint64(l))
}

func (s *Storage) notLeader(bucket uint32) error {
	addr := s.LeaderAddress()
	msg := fmt.Sprintf("this instance (%s) is not the leader of replicaset %s", s.cfg.InstanceID, s.cfg.ReplicasetID)
	if addr != "" {
		msg += "; its leader is at " + addr
	} else {
		msg += "; it knows no leader now (an election?); retry"
	}
	return Redirect(datav1.Redirect_REASON_NOT_LEADER, bucket, s.cfg.ReplicasetID, addr, msg)
}

func (s *Storage) wrongBucket(bucket uint32, st *rspb.BucketState) error {
	return Redirect(datav1.Redirect_REASON_WRONG_BUCKET, bucket, "", "",
		fmt.Sprintf("bucket %d is %s on replicaset %s", bucket, bucketStateName(st), s.cfg.ReplicasetID))
}

// propose stamps, proposes and waits for a command's result; a command
// that could not be applied (Result.Err) is an Internal error.
func (s *Storage) propose(ctx context.Context, c *rspb.Command) (Result, error) {
	c.NowUnixMs = s.cfg.Now().UnixMilli()
	data, err := Encode(c)
	if err != nil {
		return Result{}, status.Error(codes.Internal, err.Error())
	}
	res, err := multiraft.ProposeAs[Result](ctx, s.g, data)
	if err != nil {
		return Result{}, engineError(err)
	}
	if res.Err != nil {
		return Result{}, status.Error(codes.Internal, res.Err.Error())
	}
	return res, nil
}

// ensureSchema makes sure this replicaset has applied at least schema
// version want: on the leader by proposing group 0's schema, on a replica
// by waiting (bounded by ctx) for its log to bring it.
func (s *Storage) ensureSchema(ctx context.Context, want uint64) (*Schema, error) {
	if sc := s.sm.Schema(); sc.Version >= want {
		return sc, nil
	}
	if !s.IsLeader() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for {
			ch := s.sm.Changed()
			if sc := s.sm.Schema(); sc.Version >= want {
				return sc, nil
			}
			select {
			case <-ch:
			case <-wctx.Done():
				return nil, status.Errorf(codes.Unavailable, "replicaset %s on %s has applied schema version %d, the call needs %d; retry",
					s.cfg.ReplicasetID, s.cfg.InstanceID, s.sm.Schema().Version, want)
			}
		}
	}
	if err := s.cfg.GroupZero.WaitSchema(ctx, want); err != nil {
		return nil, status.Errorf(codes.Unavailable, "this instance has not applied schema version %d of group 0: %v", want, err)
	}
	if err := s.syncSchema(ctx); err != nil {
		return nil, err
	}
	sc := s.sm.Schema()
	if sc.Version < want {
		return nil, status.Errorf(codes.Unavailable, "replicaset %s could not apply schema version %d (it has %d); retry", s.cfg.ReplicasetID, want, sc.Version)
	}
	return sc, nil
}

// syncSchema proposes group 0's schema when it is newer than the applied one.
func (s *Storage) syncSchema(ctx context.Context) error {
	s.schemaMu.Lock()
	defer s.schemaMu.Unlock()
	v, spaces := s.cfg.GroupZero.Schema()
	if v <= s.sm.Schema().Version {
		return nil
	}
	s.log.Info("applying the schema of group 0", "version", v, "spaces", len(spaces))
	_, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_SetSchema{SetSchema: &rspb.SetSchema{Version: v, Spaces: spaces}}})
	return err
}

// Run keeps the replicaset in step with group 0 while this member leads
// it: it applies newer schemas, and creates the bucket records when this
// replicaset got every bucket at their bootstrap. It returns when ctx ends.
func (s *Storage) Run(ctx context.Context) {
	for ctx.Err() == nil {
		zch := s.cfg.GroupZero.Changed()
		if s.IsLeader() {
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := s.syncSchema(actx); err != nil && ctx.Err() == nil {
				s.log.Warn("cannot apply group 0's schema yet", "err", err)
			}
			if err := s.bootstrapBuckets(actx); err != nil && ctx.Err() == nil {
				s.log.Warn("cannot create the bucket records yet", "err", err)
			}
			if err := s.syncHistory(actx); err != nil && ctx.Err() == nil {
				s.log.Warn("cannot apply the history's limits yet", "err", err)
			}
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-zch:
		case <-time.After(time.Second):
		}
	}
}

// syncHistory proposes this member's history limits when they are not
// the ones applied: the leader's configuration is the replicaset's.
func (s *Storage) syncHistory(ctx context.Context) error {
	want := s.cfg.History
	if want == (HistoryLimits{}) {
		want = DefaultHistory
	}
	if want == s.sm.History() {
		return nil
	}
	s.log.Info("applying this member's history limits", "revisions", want.Revisions, "bytes", want.Bytes)
	_, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_SetHistory{SetHistory: &rspb.SetHistory{Revisions: want.Revisions, Bytes: want.Bytes}}})
	return err
}

// bootstrapBuckets creates every bucket's record, active at generation 1,
// on the replicaset that got them all at bootstrap, once: the state
// machine never overwrites a record.
func (s *Storage) bootstrapBuckets(ctx context.Context) error {
	count, boot := s.cfg.GroupZero.Buckets()
	if boot != s.cfg.ReplicasetID || count == 0 {
		return nil
	}
	if st, err := s.sm.BucketStateOf(s.cfg.DB, count); err != nil || st != nil {
		return err // done (the last bucket is created with the rest)
	}
	res, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_CreateBuckets{CreateBuckets: &rspb.CreateBuckets{First: 1, Last: count, Generation: 1}}})
	if err != nil {
		return err
	}
	if n := res.Buckets.Created; n > 0 {
		s.log.Info("bucket records created", "buckets", n)
	}
	return nil
}

// BucketCounts returns the replicaset's buckets by state, as this member
// has applied them.
func (s *Storage) BucketCounts() (BucketCounts, error) {
	_, c, err := s.sm.Buckets(s.cfg.DB)
	return c, err
}

// schemaFor returns the schema a call with schema version want uses.
func (s *Storage) schemaFor(ctx context.Context, want uint64) (*Schema, error) {
	if want == 0 {
		want, _ = s.cfg.GroupZero.Schema()
	}
	return s.ensureSchema(ctx, want)
}

// Write executes a write on the leader: the batch is checked against the
// replicaset's schema, proposed, and answered with its results.
func (s *Storage) Write(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	if !s.IsLeader() {
		return nil, s.notLeader(req.GetBucket())
	}
	sc, err := s.schemaFor(ctx, req.GetSchemaVersion())
	if err != nil {
		return nil, err
	}
	batch, err := s.prepare(sc, req.GetBucket(), req.GetOps())
	if err != nil {
		return nil, err
	}
	batch.SchemaVersion = sc.Version
	batch.RequestId = req.GetRequestId()
	if len(batch.RequestId) == 0 {
		batch.RequestId = newRequestID()
	} else if len(batch.RequestId) != requestIDLen {
		return nil, status.Errorf(codes.InvalidArgument, "request_id has %d bytes, want %d", len(batch.RequestId), requestIDLen)
	}
	out, err := s.writeBatch(ctx, batch)
	if err != nil {
		return nil, err
	}
	resp := &datav1.WriteResponse{Index: out.Result.GetIndex(), Duplicate: out.Duplicate}
	for _, r := range out.Result.GetResults() {
		resp.Results = append(resp.Results, &datav1.OpResult{Found: r.GetFound(), Tuple: r.GetTuple(), Version: r.GetVersion()})
	}
	return resp, nil
}

// SlowWrite is how long a write on the leader may take before it is
// logged as slow (at warn, with the time spent asking a moving bucket's
// source and the rest: proposing, committing and applying it, and the
// waits of its retries).
const SlowWrite = 500 * time.Millisecond

// errNeedsPrev: the bucket started receiving after the batch was made.
var errNeedsPrev = errors.New("replicaset: the batch needs the source's facts")

// writeBatch proposes a batch: for a bucket moving here, with what its
// source holds for each key (the seed's prev semantics), fetched again if
// the bucket started moving meanwhile.
func (s *Storage) writeBatch(ctx context.Context, batch *rspb.Batch) (out *BatchOutcome, err error) {
	start := time.Now()
	var lookups time.Duration // asking the source for prev facts
	defer func() {
		if took := time.Since(start); took >= SlowWrite {
			s.log.Warn("slow write", "bucket", batch.GetBucket(), "took", took, "source_lookups", lookups,
				"log", took-lookups, "ops", len(batch.GetOps()), "err", err)
		}
	}()
	for attempt := 0; ; attempt++ {
		st, err := s.sm.BucketStateOf(s.cfg.DB, batch.GetBucket())
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := s.refuseFrozen(st, batch); err != nil {
			return nil, err
		}
		if st.GetState() == rspb.BucketState_STATE_RECEIVING && !st.GetCopied() {
			t := time.Now()
			err := s.prevFacts(ctx, st, batch)
			lookups += time.Since(t)
			if err != nil {
				if !errors.Is(err, errSourceDone) {
					return nil, err
				}
				// The move completed meanwhile (once this member has
				// applied it, the bucket is active here and needs no prev),
				// or the source still serves the bucket: the router waits
				// that out, not the storage (package retry).
				return nil, s.sourceNotSending(batch.GetBucket(), err)
			}
		}
		out, err := s.applyBatch(ctx, batch)
		if errors.Is(err, errNeedsPrev) && attempt < 3 {
			continue
		}
		return out, err
	}
}

// refuseFrozen refuses, before it is proposed, a write to a bucket this
// member has frozen for its move (SENDING), with the redirect apply would
// give a round of the log later (45-90 ms while a wave of moves starts,
// and a router retrying before the switch reaches it proposes again). Not
// a write whose request id this replicaset remembers: it may be a retry
// of one applied before the freeze, whose answer apply gives from the id
// (refused here, it would go on to the destination and be applied a
// second time). The window holds every id applied before the freeze this
// member has applied, since it is never behind the records readers see.
// An abort this member has not applied yet only costs a retry.
func (s *Storage) refuseFrozen(st *rspb.BucketState, batch *rspb.Batch) error {
	if st.GetState() != rspb.BucketState_STATE_SENDING || s.sm.reqs.has(batch.GetBucket(), batch.GetRequestId()) {
		return nil
	}
	return s.refused(batch.GetBucket(), sendingRefusal(batch.GetBucket(), st).GetRefusal())
}

// checkedCopy checks chunks of a copy or a restore whole (checkCopied:
// what they carry as their source stored it goes in the log, or in
// tables, as it came) and makes the entry proposeCopy logs: with the
// tables a source wrote of them (SourceTables, which size counts the rows
// of), else with tables of their tuples when this replicaset copies
// tables (CopyTables), else the chunks alone.
func (s *Storage) checkedCopy(chunks []*rspb.CopyChunk, tables [][]byte) (cc *rspb.CopyChunks, size int, err error) {
	if err := checkCopied(chunks, true); err != nil {
		return nil, 0, status.Error(codes.InvalidArgument, err.Error())
	}
	cc = &rspb.CopyChunks{Chunks: chunks}
	switch {
	case len(tables) > 0:
		cc.Tables, cc.Summaries, size, err = s.sm.SourceTables(s.cfg.DB, chunks, tables)
	case s.cfg.CopyTables:
		cc.Tables, cc.Summaries, err = s.sm.CopyTables(s.cfg.DB, chunks)
	}
	switch {
	case errors.Is(err, errCopySST):
		return nil, 0, status.Error(codes.InvalidArgument, err.Error())
	case err != nil:
		return nil, 0, status.Error(codes.Internal, err.Error())
	}
	return cc, size, nil
}

// proposeCopy logs an entry of a copy or a restore, counted in
// copyInLog: the clients' writes beside it are not clean (writeDelay).
func (s *Storage) proposeCopy(ctx context.Context, cc *rspb.CopyChunks) (Result, error) {
	s.copyInLog.proposed.Add(1)
	defer s.copyInLog.answered.Add(1)
	return s.propose(ctx, &rspb.Command{Op: &rspb.Command_CopyChunks{CopyChunks: cc}})
}

func (s *Storage) applyBatch(ctx context.Context, batch *rspb.Batch) (*BatchOutcome, error) {
	start, mark := time.Now(), s.copyInLog.mark()
	res, err := s.propose(ctx, &rspb.Command{Op: &rspb.Command_Batch{Batch: batch}})
	if err != nil {
		return nil, err
	}
	s.writeDelay.observe(time.Since(start), s.copyInLog.clean(mark))
	out := res.Batch
	if out == nil {
		return nil, status.Error(codes.Internal, "replicaset: a batch was applied without an outcome")
	}
	if ref := out.Result.GetRefusal(); ref != nil {
		return nil, s.refused(batch.GetBucket(), ref)
	}
	return out, nil
}

// refused is the caller's error for a batch of bucket b that apply (or
// the leader before proposing) refused with ref: a redirect for a bucket
// not served here, errNeedsPrev, or the refusal itself.
func (s *Storage) refused(b uint32, ref *rspb.Refusal) error {
	switch ref.GetCode() {
	case rspb.Refusal_CODE_WRONG_BUCKET:
		return Redirect(datav1.Redirect_REASON_WRONG_BUCKET, b, "", "", ref.GetMessage()+" (replicaset "+s.cfg.ReplicasetID+")")
	case rspb.Refusal_CODE_BUCKET_MOVING:
		return Redirect(datav1.Redirect_REASON_BUCKET_MOVING, b, "", "", ref.GetMessage()+" (replicaset "+s.cfg.ReplicasetID+")")
	case rspb.Refusal_CODE_NEEDS_PREV:
		return errNeedsPrev
	}
	return refusalError(ref)
}

func newRequestID() []byte {
	id := make([]byte, requestIDLen)
	_, _ = rand.Read(id)
	return id
}

// opWhat names an operation of a write in a refusal; it is formatted
// only when one is made, not once per operation of every write.
type opWhat struct {
	n     int
	kind  rspb.OpKind
	space string
}

func (w opWhat) String() string {
	return fmt.Sprintf("op %d (%s in space %s)", w.n, opName(w.kind), w.space)
}

// prepare checks the ops of a write against the schema and turns them
// into a batch for one bucket (bucket, or the first key's when 0).
func (s *Storage) prepare(sc *Schema, bucket uint32, ops []*datav1.Op) (*rspb.Batch, error) {
	if len(ops) == 0 {
		return nil, status.Error(codes.InvalidArgument, "a write needs at least one operation")
	}
	if len(ops) > MaxBatchOps {
		return nil, status.Errorf(codes.InvalidArgument, "a write of %d operations is more than %d", len(ops), MaxBatchOps)
	}
	count, _ := s.cfg.GroupZero.Buckets()
	out := &rspb.Batch{Bucket: bucket}
	size := 0
	for i, op := range ops {
		sp := sc.ByName(op.GetSpace())
		if sp == nil {
			return nil, noSpace(i, op.GetSpace())
		}
		size += len(op.GetTuple()) + len(op.GetKey()) + len(op.GetOps())
		if size > MaxBatchBytes {
			return nil, invalid(i, "the write is larger than %d bytes", MaxBatchBytes)
		}
		r := &rspb.Op{Kind: rspb.OpKind(op.GetKind()), SpaceId: sp.ID(), Ops: op.GetOps(), IfVersion: op.IfVersion, IfAbsent: op.GetIfAbsent()}
		var key []tuple.Value
		what := opWhat{n: i + 1, kind: r.GetKind(), space: sp.Name()}
		switch op.GetKind() {
		case datav1.OpKind_OP_KIND_INSERT, datav1.OpKind_OP_KIND_REPLACE, datav1.OpKind_OP_KIND_UPSERT:
			if len(op.GetTuple()) > MaxTupleBytes {
				return nil, invalid(i, "%s: a tuple of %d bytes is more than %d", what, len(op.GetTuple()), MaxTupleBytes)
			}
			t, err := tuple.DecodeTuple(op.GetTuple())
			if err != nil {
				return nil, invalid(i, "%s: the tuple: %v", what, err)
			}
			if err := sp.CheckTuple(t); err != nil {
				return nil, invalid(i, "%s: %v", what, err)
			}
			if key, err = sp.KeyOf(t); err != nil {
				return nil, invalid(i, "%s: %v", what, err)
			}
			r.Tuple = op.GetTuple()
		case datav1.OpKind_OP_KIND_UPDATE, datav1.OpKind_OP_KIND_DELETE, datav1.OpKind_OP_KIND_CHECK:
			k, err := sp.DecodeKey(op.GetKey())
			if err != nil {
				return nil, invalid(i, "%s: %v", what, err)
			}
			key = k
		default:
			return nil, invalid(i, "op %d: unknown kind %v", i+1, op.GetKind())
		}
		if op.GetIfAbsent() && op.GetKind() != datav1.OpKind_OP_KIND_INSERT {
			return nil, invalid(i, "%s: if_absent is an insert's; this op is not one", what)
		}
		if op.GetKind() == datav1.OpKind_OP_KIND_CHECK {
			conds, err := prepareConditions(sp, what, op)
			if err != nil {
				return nil, invalid(i, "%v", err)
			}
			r.Conditions = conds
		} else if len(op.GetConditions()) > 0 {
			return nil, invalid(i, "%s: conditions are a check op's; this op is not one", what)
		}
		if op.GetKind() == datav1.OpKind_OP_KIND_UPDATE || op.GetKind() == datav1.OpKind_OP_KIND_UPSERT {
			if _, err := tuple.DecodeOps(op.GetOps()); err != nil {
				return nil, invalid(i, "%s: the update operations: %v", what, err)
			}
		}
		kb, err := tuple.EncodeKey(key...)
		if err != nil {
			return nil, invalid(i, "%s: the key: %v", what, err)
		}
		r.Key = kb
		b, err := sp.BucketOfChecked(key, count)
		if err != nil {
			return nil, invalid(i, "%s: %v", what, err)
		}
		switch {
		case out.Bucket == 0:
			out.Bucket = b
		case out.Bucket != b:
			return nil, invalid(i, "%s: its key is in bucket %d, the write's in bucket %d; one write changes one bucket (keys with the same sharding key share one)", what, b, out.Bucket)
		}
		out.Ops = append(out.Ops, r)
	}
	return out, nil
}

// MaxConditions is the most conditions one check op may carry.
const MaxConditions = 64

// prepareConditions resolves the fields of a check op's conditions and
// checks their values against the fields' types.
func prepareConditions(sp *schema.Space, what opWhat, op *datav1.Op) ([]*rspb.Condition, error) {
	conds := op.GetConditions()
	if op.IfVersion == nil && len(conds) == 0 {
		return nil, fmt.Errorf("%s: no condition; give if_version or a field condition", what)
	}
	if len(conds) > MaxConditions {
		return nil, fmt.Errorf("%s: %d conditions; at most %d are allowed", what, len(conds), MaxConditions)
	}
	format := sp.Format()
	out := make([]*rspb.Condition, 0, len(conds))
	for n, c := range conds {
		label := fmt.Sprintf("%s: condition %d", what, n+1)
		var f int
		switch {
		case c.GetField() != "" && c.GetFieldNumber() != 0:
			return nil, fmt.Errorf("%s: the field is given both by name (%q) and by number (%d); give one", label, c.GetField(), c.GetFieldNumber())
		case c.GetField() != "":
			i, ok := format.Index(c.GetField())
			if !ok {
				return nil, fmt.Errorf("%s: no field %q in space %s (its fields: %s)", label, c.GetField(), sp.Name(), fieldNames(format))
			}
			f = i
		case c.GetFieldNumber() != 0:
			if int(c.GetFieldNumber()) > len(format) {
				return nil, fmt.Errorf("%s: field %d: space %s has %d fields", label, c.GetFieldNumber(), sp.Name(), len(format))
			}
			f = int(c.GetFieldNumber()) - 1
		default:
			return nil, fmt.Errorf("%s: no field given (by name, or by number from 1)", label)
		}
		if c.GetCompare() == datav1.Compare_COMPARE_UNSPECIFIED || c.GetCompare() > datav1.Compare_COMPARE_GE {
			return nil, fmt.Errorf("%s (field %s): no comparison given; one of = != < <= > >=", label, format[f].Name)
		}
		v, err := decodeOne(c.GetValue())
		if err != nil {
			return nil, fmt.Errorf("%s (field %s): the value: %w", label, format[f].Name, err)
		}
		if err := format.CheckField(f, v); err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		out = append(out, &rspb.Condition{Field: uint32(f), Compare: rspb.Compare(c.GetCompare()), Value: c.GetValue()})
	}
	return out, nil
}

// fieldNames lists a format's field names for a message.
func fieldNames(f tuple.Format) string {
	names := make([]string, len(f))
	for i, fd := range f {
		names[i] = fd.Name
	}
	return strings.Join(names, ", ")
}

// readAt checks that this member may serve a read in mode, and makes an
// rw read linearizable (a read index on the leader).
func (s *Storage) readAt(ctx context.Context, mode datav1.Mode, bucket uint32) (*datav1.ReadInfo, error) {
	return s.readAfter(ctx, mode, bucket, false)
}

// readAfter is readAt for a caller that may have made the read index
// already (indexed: after the read arrived, on this member as leader).
func (s *Storage) readAfter(ctx context.Context, mode datav1.Mode, bucket uint32, indexed bool) (*datav1.ReadInfo, error) {
	leader := mode != datav1.Mode_MODE_RO
	if leader {
		if !s.IsLeader() {
			return nil, s.notLeader(bucket)
		}
		if !indexed {
			if err := s.readIndex(ctx); err != nil {
				return nil, engineError(err)
			}
		}
	}
	st, err := s.sm.BucketStateOf(s.cfg.DB, bucket)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	switch st.GetState() {
	case rspb.BucketState_STATE_ACTIVE, rspb.BucketState_STATE_SENDING, rspb.BucketState_STATE_RECEIVING:
	default:
		return nil, s.wrongBucket(bucket, st)
	}
	applied, commit := s.g.Applied(), s.g.Commit() // not Status: it copies raft's progress map
	info := &datav1.ReadInfo{ReplicasetId: s.cfg.ReplicasetID, InstanceId: s.cfg.InstanceID, Leader: leader, AppliedIndex: applied}
	if commit > applied {
		info.LagEntries = commit - applied
	}
	info.LeaderContactMs = -1
	if c := s.g.LeaderContact(); !c.IsZero() {
		info.LeaderContactMs = max(0, time.Since(c).Milliseconds())
	}
	return info, nil
}

// Get reads one tuple.
func (s *Storage) Get(ctx context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
	return s.get(ctx, req, false)
}

// GetMany reads several tuples, one after another, with one read index
// for all those in mode rw (made after all of them arrived, so each is
// linearizable, as Get's own read index makes it): the per-read cost of a
// read index (a goroutine waiting for the round) is paid once. errs[i] is
// reqs[i]'s failure, as Get would answer it.
func (s *Storage) GetMany(ctx context.Context, reqs []*datav1.GetRequest) (resps []*datav1.GetResponse, errs []error) {
	resps, errs = make([]*datav1.GetResponse, len(reqs)), make([]error, len(reqs))
	indexed := false
	var indexErr error
	for i, req := range reqs {
		rw := req.GetMode() != datav1.Mode_MODE_RO
		if rw && !indexed && indexErr == nil && s.IsLeader() {
			if indexErr = s.readIndex(ctx); indexErr == nil {
				indexed = true
			}
		}
		if rw && indexErr != nil {
			errs[i] = engineError(indexErr)
			continue
		}
		resps[i], errs[i] = s.get(ctx, req, indexed)
	}
	return resps, errs
}

// spaceAt returns a space of the schema at version (at least), refusing
// one that schema does not have.
func (s *Storage) spaceAt(ctx context.Context, version uint64, name string) (*schema.Space, error) {
	sc, err := s.schemaFor(ctx, version)
	if err != nil {
		return nil, err
	}
	sp := sc.ByName(name)
	if sp == nil {
		return nil, noSpace(0, name)
	}
	return sp, nil
}

func (s *Storage) get(ctx context.Context, req *datav1.GetRequest, indexed bool) (*datav1.GetResponse, error) {
	sp, err := s.spaceAt(ctx, req.GetSchemaVersion(), req.GetSpace())
	if err != nil {
		return nil, err
	}
	kb, b, err := s.keyOf(sp, req.GetKey(), req.GetBucket())
	if err != nil {
		return nil, err
	}
	info, err := s.readAfter(ctx, req.GetMode(), b, indexed)
	if err != nil {
		return nil, err
	}
	st, found, err := s.getMoving(ctx, b, sp, kb)
	if err != nil {
		return nil, err
	}
	return &datav1.GetResponse{Found: found, Tuple: st.Tuple, Version: st.Version, Info: info}, nil
}

// keyOf checks an encoded key (a tuple of its parts) and returns it in the
// key encoding with its bucket (which must be bucket when given).
func (s *Storage) keyOf(sp *schema.Space, key []byte, bucket uint32) ([]byte, uint32, error) {
	k, err := sp.DecodeKey(key)
	if err != nil {
		return nil, 0, invalid(0, "space %s: %v", sp.Name(), err)
	}
	kb, err := tuple.EncodeKey(k...)
	if err != nil {
		return nil, 0, invalid(0, "space %s: the key: %v", sp.Name(), err)
	}
	count, _ := s.cfg.GroupZero.Buckets()
	b, err := sp.BucketOfChecked(k, count)
	if err != nil {
		return nil, 0, invalid(0, "space %s: %v", sp.Name(), err)
	}
	if bucket != 0 && bucket != b {
		return nil, 0, invalid(0, "space %s: the key is in bucket %d, not %d", sp.Name(), b, bucket)
	}
	return kb, b, nil
}
