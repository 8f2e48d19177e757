package router

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/forward"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/sharding"
)

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
		// The leader learned from answers, the one group 0 records, then
		// the members: the first that has not just failed to answer (a
		// member that is not the leader names it, or says an election is
		// under way). When every one has, the first of them.
		r.mu.Lock()
		cands := []string{r.leaders[rsID], rs.LeaderAddress}
		r.mu.Unlock()
		for _, m := range rs.Members {
			cands = append(cands, m.Address)
		}
		first := ""
		for _, addr := range cands {
			if addr == "" {
				continue
			}
			if first == "" {
				first = addr
			}
			if !r.unreachable.Recent(addr) {
				return target{addr: addr}, nil
			}
		}
		if first == "" {
			return target{}, status.Errorf(codes.Unavailable, "replicaset %s has no member with an address; retry", rsID)
		}
		return target{addr: first}, nil
	}
	known := rs.Members
	if noAddress := func(m Member) bool { return m.Address == "" }; slices.ContainsFunc(known, noAddress) {
		known = slices.DeleteFunc(slices.Clone(known), noAddress)
	}
	r.mu.Lock()
	leader := cmp.Or(r.leaders[rsID], rs.LeaderAddress)
	r.mu.Unlock()
	m, ok := sharding.Nearest(r.cfg.GroupZero.Self().FailureDomain, known,
		func(m Member) map[string]string { return m.FailureDomain }, func(m Member) bool { return m.Address == leader },
		func(m Member) bool { return r.unreachable.Recent(m.Address) })
	if !ok {
		return target{}, status.Errorf(codes.Unavailable, "replicaset %s has no member with an address; retry", rsID)
	}
	return target{addr: m.Address}, nil
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

// forwardedTo is the replicaset a forwarded write was routed to ("" on a
// call that does not name one: a read).
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
			if t.addr != "" {
				r.unreachable.Answered(t.addr)
				if rw {
					r.learnLeader(rsID, t.addr)
				}
			}
			return retry.Stop, nil
		}
		rd := datav1.RedirectOf(err)
		if rd == nil || ctx.Err() != nil {
			if t.addr != "" && status.Code(err) == codes.Unavailable && rd == nil && ctx.Err() == nil {
				r.unreachable.Mark(t.addr)
				if rw {
					r.forgetLeader(rsID, t.addr)
				}
				if sendAgain(what, req) {
					// The next attempt asks another of the replicaset's
					// members (pick passes this one over), which serves
					// the call or names the leader.
					return retry.Again, forwardFailed(t.addr, rsID, err)
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
				if rerr := r.cfg.GroupZero.Refresh(ctx); rerr != nil {
					return retry.Stop, err
				}
				if next := r.cfg.GroupZero.ReplicasetOf(bucket); bucket != 0 && next != "" && next != rsID {
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
			if rerr := r.cfg.GroupZero.Refresh(ctx); rerr != nil {
				return retry.Stop, err
			}
			next := r.cfg.GroupZero.ReplicasetOf(bucket)
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

// sendAgain reports whether a call that may have reached a member that
// then did not answer may be sent to another member of the replicaset: a
// read, or a write with a request id (the replicaset applies it once);
// not a procedure call, which may have run.
func sendAgain(what string, req any) bool {
	switch what {
	case "get", "range":
		return true
	case writeCall:
		w, ok := req.(*datav1.WriteRequest)
		return ok && len(w.GetRequestId()) > 0
	}
	return false
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
		changed := r.cfg.GroupZero.Changed() // before the look: no change is missed between them
		if next := r.cfg.GroupZero.ReplicasetOf(bucket); bucket != 0 && next != "" && next != rsID {
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
