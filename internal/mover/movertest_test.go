package mover

// The fakes the mover's tests run against: group 0 is the real
// internal/meta state machine over an in-memory Pebble (so every move step
// is validated as in a cluster), and each replicaset is a BucketService
// over an in-memory gRPC connection (bufconn) that keeps bucket records and
// tuples and applies the record transitions of internal/replicaset
// (moves.go, bucket_batch.go): a repeated step is a no-op, any other
// transition is refused.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"

	node "github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/internal/storage"
)

// testTimeout bounds anything a test waits for; a test that needs it has
// failed (a driver that never ends), never a slow machine's timing.
const testTimeout = 15 * time.Second

// switchTimeoutForTest is a switch timeout short enough to wait out.
const switchTimeoutForTest = 100 * time.Millisecond

// fakeZero is group 0: each proposal is applied at once as one entry of
// the real state machine, a refusal returned as a gRPC status as the
// cluster node does; while leads is false, proposals fail (this instance
// no longer leads).
type fakeZero struct {
	mu    sync.Mutex // one apply at a time, as a Raft log
	db    *pebble.DB
	sm    *meta.SM
	index uint64
	// nowMs is the leader's clock stamped on every entry (Unix ms).
	nowMs atomic.Int64
	leads atomic.Bool
	// after, when set, runs after each proposal is applied (with its
	// result); an error is the proposer's answer instead (applied, but the
	// answer lost: a leader that crashed there).
	after    func(c *metapb.Command, res meta.Result) error
	proposed []*metapb.Command
}

func newFakeZero(t *testing.T) *fakeZero {
	t.Helper()
	db, err := storage.Open("db", storage.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	z := &fakeZero{db: db, sm: meta.New(), index: 10}
	z.nowMs.Store(1_000_000)
	z.leads.Store(true)
	return z
}

func (z *fakeZero) State() *meta.State       { return z.sm.State() }
func (z *fakeZero) Changed() <-chan struct{} { return z.sm.Changed() }
func (z *fakeZero) Leads() bool              { return z.leads.Load() }

func (z *fakeZero) Propose(ctx context.Context, c *metapb.Command) (meta.Result, error) {
	if err := ctx.Err(); err != nil {
		return meta.Result{}, status.FromContextError(err).Err()
	}
	if !z.Leads() {
		return meta.Result{}, status.Error(codes.Unavailable, "test: not the group-0 leader")
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	c.NowUnixMs = z.nowMs.Load()
	z.proposed = append(z.proposed, proto.CloneOf(c))
	data, err := meta.Encode(c)
	if err != nil {
		return meta.Result{}, err
	}
	z.index++
	b := z.db.NewIndexedBatch()
	defer b.Close()
	out, err := z.sm.Apply(b, []multiraft.Entry{{Index: z.index, Term: 1, Cmd: data}})
	if err != nil {
		return meta.Result{}, err
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return meta.Result{}, err
	}
	res := out[0].(meta.Result)
	if z.after != nil {
		if err := z.after(c, res); err != nil {
			return meta.Result{}, err
		}
	}
	if res.Err != nil {
		return res, node.StatusError(res.Err) // as the cluster node answers
	}
	return res, nil
}

// setAfter installs (nil: removes) the hook run after each proposal.
func (z *fakeZero) setAfter(f func(c *metapb.Command, res meta.Result) error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.after = f
}

// proposals returns the commands proposed so far (and forgets them).
func (z *fakeZero) takeProposals() []*metapb.Command {
	z.mu.Lock()
	defer z.mu.Unlock()
	out := z.proposed
	z.proposed = nil
	return out
}

// rsCall describes a call to a fake replicaset for its hooks: the method,
// the state a SetBuckets steps to, the buckets, and whether the call has
// been applied (hooks run before and after).
type rsCall struct {
	method  string // SetBuckets, ReceiveBuckets or SendBuckets
	state   rspb.BucketState_State
	buckets []uint32
	applied bool
}

// fakeRS is one replicaset's leader, as far as BucketService goes.
type fakeRS struct {
	rspb.UnimplementedBucketServiceServer
	id string
	c  *cluster

	mu      sync.Mutex
	records map[uint32]*rspb.BucketState
	tuples  map[uint32]map[string]*rspb.CopiedTuple // bucket -> space/key -> tuple
	// changes lists every record change applied, per bucket, e.g.
	// "SENDING(2)", "copied", "GARBAGE(2)".
	changes map[uint32][]string
	// inserted counts the tuples copies inserted here.
	inserted int
	// intercept, when set, runs before a call is applied and after: an
	// error is the call's answer (before: nothing applied; after: applied,
	// the answer lost). It may block until ctx ends.
	intercept func(ctx context.Context, call rsCall) error
	// refuse, when set, may refuse one bucket of a call on its own (the
	// reason; "" lets it through).
	refuse func(call rsCall, bucket uint32) string
	// window is the receive window its copies answer with.
	window uint32
}

// tupleKey names a tuple within its bucket.
func tupleKey(t *rspb.CopiedTuple) string { return fmt.Sprintf("%d/%s", t.GetSpaceId(), t.GetKey()) }

// seedTuples is what the source holds of bucket b at the start: 1 to 3
// tuples in space 1, and one in space 2 for odd buckets.
func seedTuples(b uint32) []*rspb.CopiedTuple {
	var out []*rspb.CopiedTuple
	for i := range b%3 + 1 {
		out = append(out, &rspb.CopiedTuple{SpaceId: 1, Key: fmt.Appendf(nil, "k%d-%d", b, i), Version: 1, Tuple: fmt.Appendf(nil, "t%d-%d", b, i)})
	}
	if b%2 == 1 {
		out = append(out, &rspb.CopiedTuple{SpaceId: 2, Key: fmt.Appendf(nil, "o%d", b), Version: 1, Tuple: []byte("odd")})
	}
	return out
}

// seedCounts counts seedTuples by space.
func seedCounts(buckets ...uint32) map[uint32]uint64 {
	out := map[uint32]uint64{}
	for _, b := range buckets {
		for _, t := range seedTuples(b) {
			out[t.GetSpaceId()]++
		}
	}
	return out
}

func (f *fakeRS) hook(ctx context.Context, call rsCall) error {
	f.mu.Lock()
	h := f.intercept
	f.mu.Unlock()
	if h == nil {
		return nil
	}
	return h(ctx, call)
}

func (f *fakeRS) refusal(call rsCall, b uint32) string {
	if f.refuse == nil {
		return ""
	}
	return f.refuse(call, b)
}

// setIntercept and setRefuse install hooks (nil removes them).
func (f *fakeRS) setIntercept(h func(ctx context.Context, call rsCall) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.intercept = h
}

func (f *fakeRS) setRefuse(h func(call rsCall, bucket uint32) string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = h
}

// record returns a copy of a bucket's record (nil: none).
func (f *fakeRS) record(b uint32) *rspb.BucketState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return proto.CloneOf(f.records[b])
}

// count returns the tuples of a bucket here.
func (f *fakeRS) count(b uint32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tuples[b])
}

// insertedCount returns how many tuples copies inserted here.
func (f *fakeRS) insertedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inserted
}

// history returns the record changes of a bucket here.
func (f *fakeRS) history(b uint32) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.changes[b])
}

func (f *fakeRS) change(b uint32, what string) { f.changes[b] = append(f.changes[b], what) }

func stateName(s rspb.BucketState_State) string {
	return map[rspb.BucketState_State]string{rspb.BucketState_STATE_ACTIVE: "ACTIVE", rspb.BucketState_STATE_SENDING: "SENDING",
		rspb.BucketState_STATE_RECEIVING: "RECEIVING", rspb.BucketState_STATE_GARBAGE: "GARBAGE"}[s]
}

func describe(r *rspb.BucketState) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("%s(%d)", stateName(r.GetState()), r.GetGeneration())
}

// setBucket applies one step by internal/replicaset's rule (CheckStep).
func (f *fakeRS) setBucket(call rsCall, s *rspb.SetBucket) *rspb.SetBucketResult {
	b := s.GetBucket()
	cur := f.records[b]
	want := &rspb.BucketState{State: s.GetState(), Generation: s.GetGeneration(), Peer: s.GetPeer()}
	repeated, why := replicaset.CheckStep(cur, s)
	if repeated {
		return &rspb.SetBucketResult{Record: cur}
	}
	if why == "" {
		why = f.refusal(call, b)
	}
	if why != "" {
		return &rspb.SetBucketResult{Record: cur, Refused: fmt.Sprintf("bucket %d on %s: %s -> %s refused: %s", b, f.id, describe(cur), describe(want), why)}
	}
	var deleted map[uint32]uint64
	if want.GetState() == rspb.BucketState_STATE_GARBAGE {
		deleted = map[uint32]uint64{}
		for _, t := range f.tuples[b] {
			deleted[t.GetSpaceId()]++
		}
		delete(f.tuples, b)
	}
	f.records[b] = want
	f.change(b, describe(want))
	return &rspb.SetBucketResult{Changed: true, Record: want, DeletedBySpace: deleted}
}

// SetBuckets implements BucketService.
func (f *fakeRS) SetBuckets(ctx context.Context, req *rspb.SetBucketsRequest) (*rspb.SetBucketsResponse, error) {
	if req.GetReplicasetId() != f.id {
		return nil, status.Errorf(codes.InvalidArgument, "this is %s, not %s", f.id, req.GetReplicasetId())
	}
	call := rsCall{method: "SetBuckets"}
	for _, s := range req.GetSteps() {
		call.state = s.GetState()
		call.buckets = append(call.buckets, s.GetBucket())
	}
	if err := f.hook(ctx, call); err != nil {
		return nil, err
	}
	resp := &rspb.SetBucketsResponse{}
	f.mu.Lock()
	for _, s := range req.GetSteps() {
		resp.Results = append(resp.Results, f.setBucket(call, s))
	}
	f.mu.Unlock()
	call.applied = true
	if err := f.hook(ctx, call); err != nil {
		return nil, err
	}
	return resp, nil
}

// ReceiveBuckets implements BucketService: the destination pulls the
// buckets from the source over SendBuckets and inserts each tuple it has
// not got; the last chunk marks the record copied.
func (f *fakeRS) ReceiveBuckets(ctx context.Context, req *rspb.ReceiveBucketsRequest) (*rspb.ReceiveBucketsResponse, error) {
	call := rsCall{method: "ReceiveBuckets"}
	for _, bg := range req.GetBuckets() {
		call.buckets = append(call.buckets, bg.GetBucket())
	}
	if err := f.hook(ctx, call); err != nil {
		return nil, err
	}
	resp := &rspb.ReceiveBucketsResponse{}
	index := map[uint32]*rspb.BucketReceived{}
	var want []*rspb.BucketGeneration
	f.mu.Lock()
	resp.Window = f.window
	for _, bg := range req.GetBuckets() {
		r := &rspb.BucketReceived{Bucket: bg.GetBucket(), CopiedBySpace: map[uint32]uint64{}}
		resp.Results = append(resp.Results, r)
		rec := f.records[bg.GetBucket()]
		switch {
		case rec.GetState() == rspb.BucketState_STATE_ACTIVE && rec.GetGeneration() == bg.GetGeneration():
		case rec.GetState() != rspb.BucketState_STATE_RECEIVING || rec.GetGeneration() != bg.GetGeneration():
			r.Refused = fmt.Sprintf("bucket %d is %s on %s, not receiving at generation %d", bg.GetBucket(), describe(rec), f.id, bg.GetGeneration())
		case rec.GetCopied():
		default:
			if why := f.refusal(call, bg.GetBucket()); why != "" {
				r.Refused = why
				continue
			}
			index[bg.GetBucket()] = r
			want = append(want, bg)
		}
	}
	f.mu.Unlock()
	if len(want) > 0 {
		conn, err := f.c.dial(f.c.addr(req.GetFrom()))
		if err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
		stream, err := rspb.NewBucketServiceClient(conn).SendBuckets(ctx, &rspb.SendBucketsRequest{ReplicasetId: req.GetFrom(), Buckets: want, ChunkTuples: 2})
		if err != nil {
			return nil, err
		}
		finished := map[uint32]bool{}
		for {
			got, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, err
			}
			f.mu.Lock()
			for _, rf := range got.GetRefused() {
				if r := index[rf.GetBucket()]; r != nil {
					r.Refused = rf.GetReason()
					finished[rf.GetBucket()] = true
				}
			}
			for _, ch := range got.GetChunks() {
				r, b := index[ch.GetBucket()], ch.GetBucket()
				rec := f.records[b]
				if r == nil || rec.GetState() != rspb.BucketState_STATE_RECEIVING || rec.GetGeneration() != ch.GetGeneration() {
					continue
				}
				if f.tuples[b] == nil {
					f.tuples[b] = map[string]*rspb.CopiedTuple{}
				}
				for _, t := range ch.GetTuples() {
					r.Sent++
					if f.tuples[b][tupleKey(t)] != nil {
						continue
					}
					f.tuples[b][tupleKey(t)] = t
					f.inserted++
					r.Copied++
					r.CopiedBySpace[t.GetSpaceId()]++
				}
				if ch.GetLast() {
					n := proto.CloneOf(rec)
					n.Copied = true
					f.records[b] = n
					f.change(b, "copied")
					finished[b] = true
				}
			}
			f.mu.Unlock()
		}
		for _, bg := range want {
			if r := index[bg.GetBucket()]; !finished[bg.GetBucket()] && r.GetRefused() == "" {
				r.Refused = "the source did not send it whole"
			}
		}
	}
	call.applied = true
	if err := f.hook(ctx, call); err != nil {
		return nil, err
	}
	return resp, nil
}

// SendBuckets implements BucketService: each bucket being sent at the
// asked generation, in chunks of ChunkTuples, its keys in order.
func (f *fakeRS) SendBuckets(req *rspb.SendBucketsRequest, stream grpc.ServerStreamingServer[rspb.SendBucketsResponse]) error {
	call := rsCall{method: "SendBuckets"}
	for _, bg := range req.GetBuckets() {
		call.buckets = append(call.buckets, bg.GetBucket())
	}
	if err := f.hook(stream.Context(), call); err != nil {
		return err
	}
	limit := max(1, int(req.GetChunkTuples()))
	f.mu.Lock()
	var out []*rspb.SendBucketsResponse
	for _, bg := range req.GetBuckets() {
		b := bg.GetBucket()
		rec := f.records[b]
		if rec.GetState() != rspb.BucketState_STATE_SENDING || rec.GetGeneration() != bg.GetGeneration() {
			out = append(out, &rspb.SendBucketsResponse{Refused: []*rspb.BucketRefusal{{Bucket: b,
				Reason: fmt.Sprintf("bucket %d is %s on %s, not sending at generation %d", b, describe(rec), f.id, bg.GetGeneration())}}})
			continue
		}
		keys := slices.Sorted(maps.Keys(f.tuples[b]))
		for len(keys) > limit {
			out = append(out, &rspb.SendBucketsResponse{Chunks: []*rspb.CopyChunk{{Bucket: b, Generation: bg.GetGeneration(), Tuples: f.copyOf(b, keys[:limit])}}})
			keys = keys[limit:]
		}
		out = append(out, &rspb.SendBucketsResponse{Chunks: []*rspb.CopyChunk{{Bucket: b, Generation: bg.GetGeneration(), Tuples: f.copyOf(b, keys), Last: true}}})
	}
	f.mu.Unlock()
	for _, m := range out {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeRS) copyOf(b uint32, keys []string) []*rspb.CopiedTuple {
	out := make([]*rspb.CopiedTuple, len(keys))
	for i, k := range keys {
		out[i] = proto.CloneOf(f.tuples[b][k])
	}
	return out
}

// cluster is group 0 and a fake replicaset per replicaset of it, each
// replicaset one instance (RF 1), every instance Online.
type cluster struct {
	t     *testing.T
	zero  *fakeZero
	rs    map[string]*fakeRS
	lis   map[string]*bufconn.Listener // by address
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by address
}

// newCluster boots a cluster of len(weights) replicasets r1, r2, ... with
// those weights and every one of buckets buckets on r1 (each with its
// seedTuples there).
func newCluster(t *testing.T, buckets uint32, weights ...uint32) *cluster {
	t.Helper()
	c := &cluster{t: t, zero: newFakeZero(t), rs: map[string]*fakeRS{}, lis: map[string]*bufconn.Listener{}, conns: map[string]*grpc.ClientConn{}}
	join := func(i int) *metapb.JoinRequest {
		return &metapb.JoinRequest{ClusterId: "c1", InstanceId: fmt.Sprintf("i%d", i), AdvertiseAddress: fmt.Sprintf("r%d.test:1", i), Uuid: fmt.Sprintf("uuid-%d", i)}
	}
	c.must(&metapb.Command{Op: &metapb.Command_Boot{Boot: &metapb.Boot{
		Properties: &metapb.ClusterProperties{ClusterId: "c1", ClusterUuid: "cu", ReplicationFactor: 1, BucketCount: buckets},
		First:      join(1)}}})
	for i := 2; i <= len(weights); i++ {
		c.must(&metapb.Command{Op: &metapb.Command_Join{Join: &metapb.Join{Request: join(i)}}})
	}
	for i, w := range weights {
		id := fmt.Sprintf("i%d", i+1)
		c.setGrade(id, meta.Online)
		rsID := c.zero.State().Instance(id).GetReplicasetId()
		if rsID != fmt.Sprintf("r%d", i+1) {
			t.Fatalf("instance %s placed in %s", id, rsID)
		}
		c.must(&metapb.Command{Op: &metapb.Command_SetReplicaset{SetReplicaset: &metapb.SetReplicaset{ReplicasetId: rsID, Weight: &w}}})
		c.addReplicaset(rsID, fmt.Sprintf("r%d.test:1", i+1))
	}
	c.must(&metapb.Command{Op: &metapb.Command_AssignBuckets{AssignBuckets: &metapb.AssignBuckets{
		Ranges: []*metapb.BucketRange{{First: 1, Last: buckets, ReplicasetId: "r1"}}}}})
	r1 := c.rs["r1"]
	for b := uint32(1); b <= buckets; b++ {
		r1.records[b] = &rspb.BucketState{State: rspb.BucketState_STATE_ACTIVE, Generation: 1}
		r1.tuples[b] = map[string]*rspb.CopiedTuple{}
		for _, tu := range seedTuples(b) {
			r1.tuples[b][tupleKey(tu)] = tu
		}
	}
	return c
}

func (c *cluster) addReplicaset(id, addr string) {
	f := &fakeRS{id: id, c: c, records: map[uint32]*rspb.BucketState{}, tuples: map[uint32]map[string]*rspb.CopiedTuple{}, changes: map[uint32][]string{}}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	rspb.RegisterBucketServiceServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	c.t.Cleanup(srv.Stop)
	c.rs[id], c.lis[addr] = f, lis
}

// addr returns the address of a replicaset's instance.
func (c *cluster) addr(rsID string) string {
	for _, m := range c.zero.State().Members(rsID) {
		return m.GetAddress()
	}
	return ""
}

// dial is Config.Dial: a connection to an instance, kept.
func (c *cluster) dial(addr string) (grpc.ClientConnInterface, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if conn := c.conns[addr]; conn != nil {
		return conn, nil
	}
	lis := c.lis[addr]
	if lis == nil {
		return nil, fmt.Errorf("no instance at %q", addr)
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = conn
	c.t.Cleanup(func() { _ = conn.Close() })
	return conn, nil
}

// must proposes a command that group 0 must accept.
func (c *cluster) must(cmd *metapb.Command) meta.Result {
	c.t.Helper()
	res, err := c.zero.Propose(context.Background(), cmd)
	if err != nil {
		c.t.Fatalf("group 0 refused %v: %v", cmd, err)
	}
	for i, s := range res.Steps {
		if s.Err != nil {
			c.t.Fatalf("group 0 refused step %d of %v: %v", i+1, cmd, s.Err)
		}
	}
	return res
}

func (c *cluster) setGrade(id string, v metapb.GradeVariant) {
	c.t.Helper()
	c.must(&metapb.Command{Op: &metapb.Command_SetTargetGrade{SetTargetGrade: &metapb.SetTargetGrade{InstanceId: id, Variant: v, Reason: "test"}}})
	inst := c.zero.State().Instance(id)
	c.must(&metapb.Command{Op: &metapb.Command_SetCurrentGrade{SetCurrentGrade: &metapb.SetCurrentGrade{
		InstanceId: id, Variant: v, ExpectedTarget: inst.GetTargetGrade()}}})
}

// start records moves of buckets to a replicaset (PREPARE), one entry.
func (c *cluster) start(to string, buckets ...uint32) {
	c.t.Helper()
	steps := make([]*metapb.Command, len(buckets))
	for i, b := range buckets {
		steps[i] = &metapb.Command{Op: &metapb.Command_StartMove{StartMove: &metapb.StartMove{Bucket: b, To: to, Reason: "test"}}}
	}
	c.must(&metapb.Command{Op: &metapb.Command_MoveSteps{MoveSteps: &metapb.MoveSteps{Steps: steps}}})
}

// mover returns a mover of the cluster.
func (c *cluster) mover(switchTimeout time.Duration) *Mover {
	return New(Config{GroupZero: c.zero, Dial: c.dial, SwitchTimeout: switchTimeout, Interval: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(c.t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now: func() time.Time { return time.UnixMilli(c.zero.nowMs.Load()) }})
}

// driveAll has m drive every recorded move until none is left (or the
// test's timeout, or until m stops leading).
func (c *cluster) driveAll(m *Mover) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), testTimeout)
	defer cancel()
	m.startDrivers(ctx)
	m.wg.Wait()
	if ctx.Err() != nil {
		c.t.Fatalf("the drivers did not end within %v; moves left: %v", testTimeout, c.zero.State().Moves)
	}
}

// span returns the buckets first..last.
func span(first, last uint32) []uint32 {
	var out []uint32
	for b := first; b <= last; b++ {
		out = append(out, b)
	}
	return out
}

// checkMoved checks that each bucket is on to in group 0 at generation
// gen, no move of it left, active there with its tuples, and its source
// from holds nothing of it (garbage at gen).
func (c *cluster) checkMoved(from, to string, gen uint64, buckets ...uint32) {
	c.t.Helper()
	st := c.zero.State()
	src, dst := c.rs[from], c.rs[to]
	for _, b := range buckets {
		if st.Buckets[b-1] != to || st.Moves[b] != nil || st.Generation(b) != gen {
			c.t.Errorf("bucket %d: on %s in group 0, move %v, generation %d; want on %s, no move, generation %d",
				b, st.Buckets[b-1], st.Moves[b], st.Generation(b), to, gen)
		}
		if r := dst.record(b); r.GetState() != rspb.BucketState_STATE_ACTIVE || r.GetGeneration() != gen {
			c.t.Errorf("bucket %d on %s: record %s, want ACTIVE(%d)", b, to, describe(r), gen)
		}
		if n := dst.count(b); n != len(seedTuples(b)) {
			c.t.Errorf("bucket %d on %s: %d tuples, want %d", b, to, n, len(seedTuples(b)))
		}
		if r := src.record(b); r.GetState() != rspb.BucketState_STATE_GARBAGE || r.GetGeneration() != gen {
			c.t.Errorf("bucket %d on %s: record %s, want GARBAGE(%d)", b, from, describe(r), gen)
		}
		if n := src.count(b); n != 0 {
			c.t.Errorf("bucket %d on %s: %d tuples left after the move", b, from, n)
		}
	}
}

// checkStayed checks that each bucket's move was undone: on from in group
// 0, no move, its generation gen used up, active on from at gen with its
// tuples, nothing of it on to.
func (c *cluster) checkStayed(from, to string, gen uint64, buckets ...uint32) {
	c.t.Helper()
	st := c.zero.State()
	src, dst := c.rs[from], c.rs[to]
	for _, b := range buckets {
		if st.Buckets[b-1] != from || st.Moves[b] != nil || st.Generation(b) != gen {
			c.t.Errorf("bucket %d: on %s in group 0, move %v, generation %d; want on %s, no move, generation %d",
				b, st.Buckets[b-1], st.Moves[b], st.Generation(b), from, gen)
		}
		if r := src.record(b); r.GetState() != rspb.BucketState_STATE_ACTIVE {
			c.t.Errorf("bucket %d on %s: record %s, want ACTIVE", b, from, describe(r))
		}
		if n := src.count(b); n != len(seedTuples(b)) {
			c.t.Errorf("bucket %d on %s: %d tuples, want %d", b, from, n, len(seedTuples(b)))
		}
		if r := dst.record(b); r != nil && r.GetState() != rspb.BucketState_STATE_GARBAGE {
			c.t.Errorf("bucket %d on %s: record %s, want none or GARBAGE", b, to, describe(r))
		}
		if n := dst.count(b); n != 0 {
			c.t.Errorf("bucket %d on %s: %d tuples of an undone move", b, to, n)
		}
	}
}

// phasesProposed returns, for each bucket, the phases proposed for it by
// SetMovePhase steps among cmds, in order.
func phasesProposed(cmds []*metapb.Command) map[uint32][]metapb.Move_Phase {
	out := map[uint32][]metapb.Move_Phase{}
	var walk func(c *metapb.Command)
	walk = func(c *metapb.Command) {
		if p := c.GetSetMovePhase(); p != nil {
			out[p.GetBucket()] = append(out[p.GetBucket()], p.GetPhase())
		}
		for _, s := range c.GetMoveSteps().GetSteps() {
			walk(s)
		}
	}
	for _, c := range cmds {
		walk(c)
	}
	return out
}

// unavailable is what a replicaset that crashed (or lost its leader)
// answers.
var unavailable = status.Error(codes.Unavailable, "test: the leader is gone")
