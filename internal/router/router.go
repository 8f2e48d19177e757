package router

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/schema"
	"github.com/shardkit/shardkit/tuple"
)

// MoveWait bounds how long the router waits for a bucket's move to pass
// its switch (the mover aborts a switch that takes longer than 2s).
const MoveWait = 3 * time.Second

// Member is one instance of a replicaset.
type Member struct {
	InstanceID    string
	Address       string
	FailureDomain map[string]string
}

// Replicaset is a replicaset as group 0 records it.
type Replicaset struct {
	ID string
	// LeaderAddress is the address of the leader group 0 last recorded
	// ("" when none).
	LeaderAddress string
	Members       []Member
	Weight        uint32
	// Buckets is how many buckets group 0 places on it.
	Buckets int
}

// Topology is group 0's view the router routes by; the server adapts
// internal/meta to it. Its answers may be a little behind the leader's.
type Topology interface {
	BucketCount() uint32
	// ReplicasetOf returns the replicaset holding a bucket ("" when none).
	ReplicasetOf(bucket uint32) string
	// Replicasets returns the replicasets in service, by id.
	Replicasets() []Replicaset
	// Space returns a space compiled (the same value until the schema
	// version changes).
	Space(name string) (*schema.Space, bool)
	// Spaces returns every space's definition, for GetRouting and ListSpaces.
	Spaces() []*datav1.Space
	SchemaVersion() uint64
	ShardingVersion() uint64
	// Self is this instance.
	Self() Member
	// Refresh catches this instance's view up with group 0's leader.
	Refresh(ctx context.Context) error
	// Changed returns a channel closed at the next change of this
	// instance's view of group 0.
	Changed() <-chan struct{}
}

// Local is this instance's storage of its replicaset (nil when it has
// none yet); the server passes internal/replicaset's Storage.
type Local interface {
	ReplicasetID() string
	IsLeader() bool
	LeaderAddress() string
	Write(context.Context, *datav1.WriteRequest) (*datav1.WriteResponse, error)
	Get(context.Context, *datav1.GetRequest) (*datav1.GetResponse, error)
	// GetMany serves several Gets with one read index for all (errs[i]:
	// reqs[i]'s failure, as Get would answer it).
	GetMany(ctx context.Context, reqs []*datav1.GetRequest) (resps []*datav1.GetResponse, errs []error)
	Range(context.Context, *datav1.RangeRequest) (*datav1.RangeResponse, error)
	Call(context.Context, *datav1.CallRequest) (*datav1.CallResponse, error)
}

// DDL changes the spaces in group 0; the router calls it on the group-0
// leader (the server routes the DDL calls there).
type DDL interface {
	CreateSpace(ctx context.Context, sp *datav1.Space, ifNotExists bool) (*datav1.Space, error)
	DropSpace(ctx context.Context, name string) error
}

// Config configures a Router.
type Config struct {
	Topology Topology
	// Local returns this instance's storage (nil while it has none).
	Local func() Local
	DDL   DDL
	// Dial returns a connection to another instance (kept by the caller).
	Dial  func(addr string) (grpc.ClientConnInterface, error)
	Procs *proc.Registry
	// Attempts bounds how many places one call is tried at (default 4).
	Attempts int
	// MoveBackoff is how long a call that finds its bucket in its move's
	// switch waits before it asks again, unless group 0 places the bucket
	// elsewhere first (default 10ms; it doubles up to 200ms, or stays as
	// set when larger). The whole wait is bounded by MoveWait.
	MoveBackoff time.Duration
	Logger      *slog.Logger
	// AuthorizeItem checks one item of a Multi (or call of a Stream) as
	// its own unary call would be checked (nil: every item is allowed); a
	// refused item is answered with the error.
	AuthorizeItem func(ctx context.Context, item *datav1.MultiItem) error
	// ObserveCall, when set, is told of each call of a Stream served: the
	// unary method it stands for, the code of its answer, and how long it
	// took from its request's arrival (the calls of a request end
	// together).
	ObserveCall func(method string, code codes.Code, took time.Duration)
}

// Router serves DataService.
type Router struct {
	datav1.UnimplementedDataServiceServer
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	leaders map[string]string // replicaset -> leader address learned from answers

	workers *workers // the goroutines of stream requests and Multi items (workers.go)
}

var _ datav1.DataServiceServer = (*Router)(nil)

// New makes a router.
func New(cfg Config) *Router {
	if cfg.Attempts <= 0 {
		cfg.Attempts = 4
	}
	if cfg.MoveBackoff <= 0 {
		cfg.MoveBackoff = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Router{cfg: cfg, log: cfg.Logger.With("component", "router"), leaders: map[string]string{}, workers: newWorkers()}
}

func (r *Router) local() Local {
	if r.cfg.Local == nil {
		return nil
	}
	return r.cfg.Local()
}

func (r *Router) learnLeader(rs, addr string) {
	if addr == "" {
		return
	}
	r.mu.Lock()
	r.leaders[rs] = addr
	r.mu.Unlock()
}

func (r *Router) forgetLeader(rs, addr string) {
	r.mu.Lock()
	if r.leaders[rs] == addr {
		delete(r.leaders, rs)
	}
	r.mu.Unlock()
}

func (r *Router) replicaset(id string) (Replicaset, bool) {
	for _, rs := range r.cfg.Topology.Replicasets() {
		if rs.ID == id {
			return rs, true
		}
	}
	return Replicaset{}, false
}

// target is where one attempt goes: this instance's storage, or addr.
type target struct {
	local Local
	addr  string
}

// pick chooses the member of replicaset rs that should serve a call.
func (r *Router) pick(rsID string, rw bool) (target, error) {
	if l := r.local(); l != nil && l.ReplicasetID() == rsID {
		if !rw || l.IsLeader() {
			return target{local: l}, nil
		}
		if addr := l.LeaderAddress(); addr != "" {
			return target{addr: addr}, nil
		}
	}
	rs, ok := r.replicaset(rsID)
	if !ok {
		return target{}, status.Errorf(codes.Unavailable, "replicaset %s is not known to this instance yet; retry", rsID)
	}
	if rw {
		r.mu.Lock()
		addr := r.leaders[rsID]
		r.mu.Unlock()
		if addr == "" {
			addr = rs.LeaderAddress
		}
		if addr == "" && len(rs.Members) > 0 {
			addr = rs.Members[0].Address
		}
		if addr == "" {
			return target{}, status.Errorf(codes.Unavailable, "replicaset %s has no member with an address; retry", rsID)
		}
		return target{addr: addr}, nil
	}
	m, ok := nearest(r.cfg.Topology.Self(), rs.Members)
	if !ok {
		return target{}, status.Errorf(codes.Unavailable, "replicaset %s has no members; retry", rsID)
	}
	return target{addr: m.Address}, nil
}

// nearest picks the member sharing the most failure-domain values with
// self (R2, R6: prefer a replica in our own zone), at random among equals.
func nearest(self Member, members []Member) (Member, bool) {
	best, score := []Member(nil), -1
	for _, m := range members {
		if m.Address == "" {
			continue
		}
		s := 0
		for k, v := range self.FailureDomain {
			if m.FailureDomain[k] == v {
				s++
			}
		}
		switch {
		case s > score:
			best, score = []Member{m}, s
		case s == score:
			best = append(best, m)
		}
	}
	if len(best) == 0 {
		return Member{}, false
	}
	return best[rand.IntN(len(best))], true
}

// ReplicasetHeader names, on a call one router forwards to another, the
// replicaset the sender routed it to (its view of group 0).
const ReplicasetHeader = "x-shardkit-replicaset"

// forwardedCtx marks a call forwarded; a write also names the replicaset
// rsID it was sent to (route: the receiver's storage decides it).
func forwardedCtx(ctx context.Context, what, rsID string) context.Context {
	if what == writeCall {
		return metadata.AppendToOutgoingContext(ctx, forward.MarkerHeader, "1", ReplicasetHeader, rsID)
	}
	return metadata.AppendToOutgoingContext(ctx, forward.MarkerHeader, "1")
}

// writeCall is route's what for a write: the one kind of call a router
// hands to the replicaset its sender named (route).
const writeCall = "write"

// forwardedTo is the replicaset a forwarded call was routed to ("" when
// the sender did not say: an instance built before 2026-11-26).
func forwardedTo(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, ReplicasetHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

// route runs one call on the member of replicaset rsID that must serve it,
// following redirects (retry.Policy). Over RPC the call is marked
// forwarded; a forwarded call that this instance cannot serve is answered
// with a redirect. A bucket in its move's switch is waited out here, up to
// MoveWait, without spending attempts: of the client, the router and the
// storage, the router alone waits a switch out (package retry).
func route[Req, Resp any](ctx context.Context, r *Router, what string, rsID string, bucket uint32, rw bool, req Req,
	local func(Local, context.Context, Req) (Resp, error),
	remote func(datav1.DataServiceClient, context.Context, Req, ...grpc.CallOption) (Resp, error),
) (Resp, error) {
	var zero Resp
	forwarded := forward.Forwarded(ctx)
	if forwarded && what == writeCall {
		if to, l := forwardedTo(ctx), r.local(); to != "" && to != rsID && l != nil && l.ReplicasetID() == to {
			// The sender's view of group 0 places the bucket on this
			// instance's replicaset and ours does not: one of the two is
			// behind (a new instance's is, while it catches up with group 0,
			// just as the rebalancer moves buckets to it). For a write the
			// replicaset's own log decides: apply takes it only for a bucket
			// active or receiving here and refuses it otherwise, with a
			// redirect. Sending it back to where our view places the bucket
			// would bounce it between the two until it gave up. Not for a
			// read: the storage serves a bucket it is sending (frozen, the
			// copy's source) to readers, and after the switch the writes are
			// on the destination, so a sender behind would read stale data.
			rsID = to
		}
	}
	policy := retry.Policy{
		Attempts: r.cfg.Attempts,
		// A NOT_LEADER without a leader: an election; give it a moment.
		Backoff:   retry.Backoff{Initial: electionWait, Max: electionWait},
		Switch:    retry.Backoff{Initial: r.cfg.MoveBackoff, Max: maxMoveBackoff},
		SwitchFor: MoveWait,
		// A wait ends early when group 0 places the bucket elsewhere.
		Wait: func(ctx context.Context, d time.Duration) error {
			var done bool
			if rsID, done = r.waitSwitch(ctx, bucket, rsID, d); done {
				return ctx.Err()
			}
			return nil
		},
	}
	var resp Resp
	out, err := policy.Run(ctx, func(int) (retry.Verdict, error) {
		if rsID == "" {
			return retry.Stop, status.Errorf(codes.Unavailable, "bucket %d is not assigned to a replicaset yet (are the buckets bootstrapped? `shardkit status`); retry", bucket)
		}
		t, err := r.pick(rsID, rw)
		if err != nil {
			return retry.Stop, err
		}
		switch {
		case t.local != nil:
			resp, err = local(t.local, ctx, req)
		case forwarded:
			// Another router sent it here believing this instance serves
			// it: say where to go instead, never forward a second time.
			return retry.Stop, r.redirectFor(rsID, bucket, t.addr)
		default:
			conn, derr := r.cfg.Dial(t.addr)
			if derr != nil {
				return retry.Stop, status.Errorf(codes.Unavailable, "cannot reach %s of replicaset %s: %v", t.addr, rsID, derr)
			}
			resp, err = remote(datav1.NewDataServiceClient(conn), forwardedCtx(ctx, what, rsID), req)
		}
		if err == nil {
			if rw && t.addr != "" {
				r.learnLeader(rsID, t.addr)
			}
			return retry.Stop, nil
		}
		rd := datav1.RedirectOf(err)
		if rd == nil || ctx.Err() != nil {
			if t.addr != "" && status.Code(err) == codes.Unavailable && rd == nil {
				if rw {
					r.forgetLeader(rsID, t.addr)
				}
				return retry.Stop, forwardFailed(t.addr, rsID, err)
			}
			return retry.Stop, err
		}
		switch rd.GetReason() {
		case datav1.Redirect_REASON_NOT_LEADER:
			r.forgetLeader(rsID, t.addr)
			if other := rd.GetReplicasetId(); other != "" && other != rsID {
				// The member asked places the bucket on another replicaset
				// (its view of group 0 or ours is behind, during a move):
				// its leader hint is about that replicaset, never ours.
				r.learnLeader(other, rd.GetLeaderAddress())
				if rerr := r.cfg.Topology.Refresh(ctx); rerr != nil {
					return retry.Stop, err
				}
				if next := r.cfg.Topology.ReplicasetOf(bucket); bucket != 0 && next != "" && next != rsID {
					rsID = next
					return retry.Follow, err
				}
				return retry.Switch, err
			}
			if rd.GetLeaderAddress() != "" && rd.GetLeaderAddress() != t.addr {
				r.learnLeader(rsID, rd.GetLeaderAddress())
				return retry.Follow, err
			}
			return retry.Again, err
		case datav1.Redirect_REASON_WRONG_BUCKET, datav1.Redirect_REASON_BUCKET_MOVING:
			if what == "call" && rd.GetBucket() != 0 && rd.GetBucket() != bucket {
				// The procedure's own write to a bucket the call was not
				// routed by (a call by replicaset has no bucket): no other
				// replicaset serves the call better.
				return retry.Stop, procBucketError(rsID, rd, err)
			}
			// This instance's view of group 0 may be behind: catch up
			// and look again.
			if rerr := r.cfg.Topology.Refresh(ctx); rerr != nil {
				return retry.Stop, err
			}
			next := r.cfg.Topology.ReplicasetOf(bucket)
			if next == rsID && rd.GetReason() == datav1.Redirect_REASON_WRONG_BUCKET {
				return retry.Stop, err
			}
			if next == rsID {
				return retry.Switch, err // the switch is under way: wait
			}
			rsID = next
			return retry.Follow, err
		}
		return retry.Stop, err
	})
	if err != nil {
		if out != retry.Stopped {
			r.log.Debug("giving up after redirects", "call", what, "replicaset", rsID, "err", err)
		}
		return zero, err
	}
	return resp, nil
}

// How long the router waits for an election (a NOT_LEADER that names no
// leader), and the longest wait between tries of a bucket in its switch
// (Config.MoveBackoff doubles up to it).
const (
	electionWait   = 100 * time.Millisecond
	maxMoveBackoff = 200 * time.Millisecond
)

// forwardFailed is the answer to a call this instance forwarded to addr,
// a member of replicaset rsID, that failed there as unavailable: it names
// addr, so that the caller does not blame this instance for it.
func forwardFailed(addr, rsID string, err error) error {
	st := status.Convert(err)
	p := st.Proto()
	p.Message = fmt.Sprintf("%s%s (replicaset %s), which is unavailable: %s", ForwardFailedPrefix, addr, rsID, st.Message())
	return status.ErrorProto(p)
}

// ForwardFailedPrefix starts the message of a call this instance forwarded
// to another that was unavailable: the CLI names that instance, not this
// one, as the one that failed.
const ForwardFailedPrefix = "forwarded to "

// procBucketError is the answer to a call whose procedure wrote a key of
// a bucket that replicaset rsID, where it ran, does not serve (err, the
// storage's redirect rd): refused, as retrying it there would be; a bucket
// in its move's switch is the storage's redirect itself, retried by the
// client until the switch is done.
func procBucketError(rsID string, rd *datav1.Redirect, err error) error {
	if rd.GetReason() == datav1.Redirect_REASON_BUCKET_MOVING {
		return err
	}
	return status.Errorf(codes.FailedPrecondition,
		"the procedure ran on replicaset %s and wrote a key of bucket %d, which that replicaset does not hold (%s): a procedure writes only the buckets of its replicaset; call it by that bucket (shardkit call --bucket %d) to run it where the key is",
		rsID, rd.GetBucket(), status.Convert(err).Message(), rd.GetBucket())
}

// waitSwitch waits, during a bucket's move, until this instance's view of
// group 0 places bucket elsewhere than rsID (the switch is done: it
// returns that replicaset, to go there at once), or for d (the backoff of
// a switch that ends otherwise, as an aborted move does: it returns
// rsID), or until ctx ends (done). Other changes of group 0 wake it only
// to look again.
func (r *Router) waitSwitch(ctx context.Context, bucket uint32, rsID string, d time.Duration) (next string, done bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		changed := r.cfg.Topology.Changed() // before the look: no change is missed between them
		if next := r.cfg.Topology.ReplicasetOf(bucket); bucket != 0 && next != "" && next != rsID {
			return next, false
		}
		select {
		case <-ctx.Done():
			return rsID, true
		case <-timer.C:
			return rsID, false
		case <-changed:
		}
	}
}

// redirectFor is the answer to a forwarded call this instance cannot serve.
func (r *Router) redirectFor(rsID string, bucket uint32, addr string) error {
	msg := fmt.Sprintf("this instance does not serve replicaset %s's call", rsID)
	if addr != "" {
		msg += "; try " + addr
	}
	st := status.New(codes.Unavailable, msg)
	if d, err := st.WithDetails(&datav1.Redirect{Reason: datav1.Redirect_REASON_NOT_LEADER, Bucket: bucket, ReplicasetId: rsID, LeaderAddress: addr}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// bucketOfKey returns the bucket of an encoded key (a tuple of its parts)
// of a space.
func (r *Router) bucketOfKey(space string, key []byte) (uint32, error) {
	sp, ok := r.cfg.Topology.Space(space)
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
	b, err := sp.BucketOf(key, r.cfg.Topology.BucketCount())
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
	n := r.cfg.Topology.BucketCount()
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
		sp, ok := r.cfg.Topology.Space(op.GetSpace())
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

// Write implements DataService.
func (r *Router) Write(ctx context.Context, req *datav1.WriteRequest) (*datav1.WriteResponse, error) {
	b, err := r.bucketOfWrite(req)
	if err != nil {
		return nil, err
	}
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.Topology.SchemaVersion()
	}
	req.Bucket = b
	return route(ctx, r, writeCall, r.cfg.Topology.ReplicasetOf(b), b, true, req, Local.Write, datav1.DataServiceClient.Write)
}

// Get implements DataService.
func (r *Router) Get(ctx context.Context, req *datav1.GetRequest) (*datav1.GetResponse, error) {
	if err := r.placeGet(req); err != nil {
		return nil, err
	}
	b, rw := req.GetBucket(), req.GetMode() != datav1.Mode_MODE_RO
	return route(ctx, r, "get", r.cfg.Topology.ReplicasetOf(b), b, rw, req, Local.Get, datav1.DataServiceClient.Get)
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
		req.SchemaVersion = r.cfg.Topology.SchemaVersion()
	}
	return nil
}

// Multi implements DataService: each item is served as the unary Write
// or Get would be (Write and Get below: the same routing, forwarding and
// redirects), all of them concurrently (the replicaset's Raft group
// batches concurrent proposals into one append), and answered with its
// own result or full error status. Access checks are per item too
// (Config.AuthorizeItem: an item refused is answered with its refusal and
// not served); Stream's calls go through here.
func (r *Router) Multi(ctx context.Context, req *datav1.MultiRequest) (*datav1.MultiResponse, error) {
	if err := datav1.CheckMulti(req); err != nil {
		return nil, err
	}
	items := req.GetItems()
	out := &datav1.MultiResponse{Results: make([]*datav1.MultiResult, len(items))}
	refused := 0
	if r.cfg.AuthorizeItem != nil {
		for i, it := range items {
			if err := r.cfg.AuthorizeItem(ctx, it); err != nil {
				out.Results[i] = datav1.ResultOf(nil, err)
				refused++
			}
		}
	}
	serve := func(i int) {
		switch op := items[i].GetOp().(type) {
		case *datav1.MultiItem_Write:
			resp, err := r.Write(ctx, op.Write)
			out.Results[i] = datav1.ResultOf(resp, err)
		case *datav1.MultiItem_Get:
			resp, err := r.Get(ctx, op.Get)
			out.Results[i] = datav1.ResultOf(resp, err)
		default:
			out.Results[i] = datav1.ResultOf(nil, status.Errorf(codes.InvalidArgument, "Multi item %d is neither a write nor a get", i+1))
		}
	}
	switch {
	case refused == len(items):
		return out, nil
	case len(items) == 1:
		serve(0)
		return out, nil
	}
	rest := r.getLocally(ctx, items, out)
	if len(rest) == 1 {
		serve(rest[0])
		return out, nil
	}
	var wg sync.WaitGroup
	wg.Add(len(rest))
	for _, i := range rest {
		r.workers.Go(func() {
			defer wg.Done()
			serve(i)
		})
	}
	wg.Wait()
	return out, nil
}

// getLocally answers the point reads of a Multi that this instance serves
// itself (pick's choice: as the replicaset's leader for rw) together, in
// this goroutine: Local.GetMany makes one read index for all of them
// instead of one per read, each in a goroutine of its own (a read load's
// profile: those goroutines, their stack growth and their wake-ups were a
// fifth of a leader's CPU). It returns the items left to serve: the
// others, and every read GetMany did not answer (a redirect, an error),
// which go the way of a unary Get, with its retries.
func (r *Router) getLocally(ctx context.Context, items []*datav1.MultiItem, out *datav1.MultiResponse) []int {
	l := r.local()
	rest := make([]int, 0, len(items))
	var idx []int
	var reqs []*datav1.GetRequest
	for i, it := range items {
		if out.Results[i] != nil {
			continue // refused by its access check
		}
		g := it.GetGet()
		if g == nil || l == nil {
			rest = append(rest, i)
			continue
		}
		if err := r.placeGet(g); err != nil {
			rest = append(rest, i) // Get answers the same refusal
			continue
		}
		rsID := r.cfg.Topology.ReplicasetOf(g.GetBucket())
		if t, err := r.pick(rsID, g.GetMode() != datav1.Mode_MODE_RO); rsID == "" || err != nil || t.local != l {
			rest = append(rest, i)
			continue
		}
		idx, reqs = append(idx, i), append(reqs, g)
	}
	if len(reqs) < 2 {
		return append(rest, idx...)
	}
	resps, errs := l.GetMany(ctx, reqs)
	for j, i := range idx {
		if errs[j] != nil {
			rest = append(rest, i)
			continue
		}
		out.Results[i] = datav1.ResultOf(resps[j], nil)
	}
	return rest
}

// Range implements DataService.
func (r *Router) Range(ctx context.Context, req *datav1.RangeRequest) (*datav1.RangeResponse, error) {
	b := req.GetBucket()
	if err := r.checkBucket(b); err != nil {
		return nil, err
	}
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.Topology.SchemaVersion()
	}
	rw := req.GetMode() != datav1.Mode_MODE_RO
	return route(ctx, r, "range", r.cfg.Topology.ReplicasetOf(b), b, rw, req, Local.Range, datav1.DataServiceClient.Range)
}

// callMode resolves a call's mode: as asked, or the procedure's own.
func (r *Router) callMode(req *datav1.CallRequest) (datav1.Mode, error) {
	p, ok := r.cfg.Procs.Lookup(req.GetProcedure())
	if !ok {
		return 0, status.Errorf(codes.NotFound, "no procedure %q (`shardkit call --list` lists them)", req.GetProcedure())
	}
	switch req.GetMode() {
	case datav1.Mode_MODE_RO:
		if p.Mode == proc.RW {
			return 0, status.Errorf(codes.InvalidArgument, "procedure %s writes (rw); call it in mode rw", p.Name)
		}
		return datav1.Mode_MODE_RO, nil
	case datav1.Mode_MODE_RW:
		return datav1.Mode_MODE_RW, nil
	}
	if p.Mode == proc.RW {
		return datav1.Mode_MODE_RW, nil
	}
	return datav1.Mode_MODE_RO, nil
}

// Call implements DataService: on the replicaset named, or holding the
// bucket, or (neither given) this instance's own or any replicaset.
func (r *Router) Call(ctx context.Context, req *datav1.CallRequest) (*datav1.CallResponse, error) {
	mode, err := r.callMode(req)
	if err != nil {
		return nil, err
	}
	req.Mode = mode
	if req.GetSchemaVersion() == 0 {
		req.SchemaVersion = r.cfg.Topology.SchemaVersion()
	}
	rsID := req.GetReplicasetId()
	switch {
	case rsID != "":
		if err := r.inService(ctx, rsID); err != nil {
			return nil, err
		}
	case req.GetBucket() != 0:
		if err := r.checkBucket(req.GetBucket()); err != nil {
			return nil, err
		}
		rsID = r.cfg.Topology.ReplicasetOf(req.GetBucket())
	default:
		if l := r.local(); l != nil {
			rsID = l.ReplicasetID()
		} else if rss := r.cfg.Topology.Replicasets(); len(rss) > 0 {
			rsID = rss[rand.IntN(len(rss))].ID
		}
	}
	return route(ctx, r, "call", rsID, req.GetBucket(), mode == datav1.Mode_MODE_RW, req, Local.Call, datav1.DataServiceClient.Call)
}

// inService refuses a call named to a replicaset that is not in service,
// once this instance has caught up with group 0 (it may have been added
// just now).
func (r *Router) inService(ctx context.Context, rsID string) error {
	if l := r.local(); l != nil && l.ReplicasetID() == rsID {
		return nil
	}
	if _, ok := r.replicaset(rsID); ok {
		return nil
	}
	if err := r.cfg.Topology.Refresh(ctx); err != nil {
		return status.Errorf(codes.Unavailable, "replicaset %s is not known to this instance yet (it could not catch up with group 0: %v); retry", rsID, err)
	}
	var ids []string
	for _, rs := range r.cfg.Topology.Replicasets() {
		if rs.ID == rsID {
			return nil
		}
		ids = append(ids, rs.ID)
	}
	inService := "none"
	if len(ids) > 0 {
		inService = strings.Join(ids, ", ")
	}
	return status.Errorf(codes.NotFound, "no replicaset %q in service (replicasets in service: %s)", rsID, inService)
}

// MapCall implements DataService: the procedure on every replicaset that
// holds buckets (or, before buckets are placed, on every replicaset).
func (r *Router) MapCall(ctx context.Context, req *datav1.MapCallRequest) (*datav1.MapCallResponse, error) {
	var ids []string
	for _, rs := range r.cfg.Topology.Replicasets() {
		if rs.Buckets > 0 {
			ids = append(ids, rs.ID)
		}
	}
	if len(ids) == 0 {
		for _, rs := range r.cfg.Topology.Replicasets() {
			ids = append(ids, rs.ID)
		}
	}
	out := make([]*datav1.ReplicasetResult, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			res := &datav1.ReplicasetResult{ReplicasetId: id}
			resp, err := r.Call(ctx, &datav1.CallRequest{Procedure: req.GetProcedure(), Args: req.GetArgs(), Mode: req.GetMode(),
				ReplicasetId: id, SchemaVersion: req.GetSchemaVersion()})
			if err != nil {
				res.Error = status.Convert(err).Message()
			} else {
				res.Result = resp.GetResult()
			}
			out[i] = res
		})
	}
	wg.Wait()
	return &datav1.MapCallResponse{Results: out}, nil
}

// GetRouting implements DataService.
func (r *Router) GetRouting(context.Context, *datav1.GetRoutingRequest) (*datav1.GetRoutingResponse, error) {
	t := r.cfg.Topology
	resp := &datav1.GetRoutingResponse{BucketCount: t.BucketCount(), Spaces: t.Spaces(), SchemaVersion: t.SchemaVersion(), ShardingVersion: t.ShardingVersion()}
	var cur *datav1.BucketRange
	for b := uint32(1); b <= t.BucketCount(); b++ {
		rs := t.ReplicasetOf(b)
		if cur != nil && cur.GetReplicasetId() == rs && rs != "" {
			cur.Last = b
			continue
		}
		if rs == "" {
			cur = nil
			continue
		}
		cur = &datav1.BucketRange{First: b, Last: b, ReplicasetId: rs}
		resp.Buckets = append(resp.Buckets, cur)
	}
	for _, rs := range t.Replicasets() {
		route := &datav1.ReplicasetRoute{ReplicasetId: rs.ID, LeaderAddress: rs.LeaderAddress, Weight: rs.Weight}
		r.mu.Lock()
		if addr := r.leaders[rs.ID]; addr != "" {
			route.LeaderAddress = addr
		}
		r.mu.Unlock()
		if l := r.local(); l != nil && l.ReplicasetID() == rs.ID && l.LeaderAddress() != "" {
			route.LeaderAddress = l.LeaderAddress()
		}
		for _, m := range rs.Members {
			route.Members = append(route.Members, &datav1.Member{InstanceId: m.InstanceID, Address: m.Address, FailureDomain: m.FailureDomain})
		}
		resp.Replicasets = append(resp.Replicasets, route)
	}
	return resp, nil
}

// ListSpaces implements DataService.
func (r *Router) ListSpaces(context.Context, *datav1.ListSpacesRequest) (*datav1.ListSpacesResponse, error) {
	return &datav1.ListSpacesResponse{Spaces: r.cfg.Topology.Spaces(), SchemaVersion: r.cfg.Topology.SchemaVersion()}, nil
}

// CreateSpace implements DataService (on the group-0 leader).
func (r *Router) CreateSpace(ctx context.Context, req *datav1.CreateSpaceRequest) (*datav1.CreateSpaceResponse, error) {
	if req.GetSpace() == nil {
		return nil, status.Error(codes.InvalidArgument, "no space to create")
	}
	sp, err := r.cfg.DDL.CreateSpace(ctx, req.GetSpace(), req.GetIfNotExists())
	if err != nil {
		return nil, err
	}
	return &datav1.CreateSpaceResponse{Space: sp}, nil
}

// DropSpace implements DataService (on the group-0 leader): without force
// it is refused while the space holds tuples (counted on every replicaset
// just before; a write racing the drop is dropped with it).
func (r *Router) DropSpace(ctx context.Context, req *datav1.DropSpaceRequest) (*datav1.DropSpaceResponse, error) {
	if _, ok := r.cfg.Topology.Space(req.GetName()); !ok {
		return nil, status.Errorf(codes.NotFound, "no space %q", req.GetName())
	}
	n, err := r.Count(ctx, req.GetName())
	if err != nil && !req.GetForce() {
		return nil, fmt.Errorf("cannot count the tuples of space %s before dropping it (--force drops it anyway): %w", req.GetName(), err)
	}
	if n > 0 && !req.GetForce() {
		noun := "tuples"
		if n == 1 {
			noun = "tuple"
		}
		return nil, status.Errorf(codes.FailedPrecondition, "space %s holds %d %s; delete them first, or drop it with them (--force)", req.GetName(), n, noun)
	}
	if err := r.cfg.DDL.DropSpace(ctx, req.GetName()); err != nil {
		return nil, err
	}
	return &datav1.DropSpaceResponse{Tuples: n}, nil
}

// Count returns the number of tuples of a space in the cluster, each
// bucket counted once (proc.CountCluster: the built-in count_buckets on
// every replicaset, summed, counted again while a bucket moved between
// two replicasets' counts).
func (r *Router) Count(ctx context.Context, space string) (uint64, error) {
	args := tuple.AppendTuple(nil, tuple.Tuple{tuple.String(space)})
	n, err := proc.CountCluster(ctx, r.cfg.Topology.BucketCount(), func(ctx context.Context) ([]tuple.Tuple, error) {
		resp, err := r.MapCall(ctx, &datav1.MapCallRequest{Procedure: "count_buckets", Args: args, Mode: datav1.Mode_MODE_RW})
		if err != nil {
			return nil, err
		}
		results := make([]tuple.Tuple, 0, len(resp.GetResults()))
		var failed []string
		for _, res := range resp.GetResults() {
			if res.GetError() != "" {
				failed = append(failed, res.GetReplicasetId()+": "+res.GetError())
				continue
			}
			t, err := tuple.DecodeTuple(res.GetResult())
			if err != nil {
				failed = append(failed, res.GetReplicasetId()+": a bad count result: "+err.Error())
				continue
			}
			results = append(results, t)
		}
		if len(failed) > 0 {
			slices.Sort(failed)
			return nil, status.Errorf(codes.Unavailable, "counting failed on %d replicasets: %v", len(failed), failed)
		}
		return results, nil
	})
	switch {
	case errors.Is(err, proc.ErrCountInFlux):
		return 0, status.Errorf(codes.Unavailable, "count %s: %v", space, err)
	case errors.Is(err, proc.ErrBadCount):
		return 0, status.Errorf(codes.Internal, "count %s: %v", space, err)
	}
	return n, err
}
