package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/retry"
)

// dataCall runs one data-layer call about bucket b (0: not known): at the
// member the routing table names (the leader for rw), following redirects
// and retrying what is safe to retry (retry.Policy), each attempt bounded
// by Config.Timeout and the whole by ctx and Config.Attempts (with
// Attempts left zero, a ctx with a deadline is tried until it). Without a
// routing table it asks any instance, which routes the call itself. A
// bucket in its move's switch is waited out by the router the call
// reaches (package retry): a REASON_BUCKET_MOVING that still reaches the
// client is one more counted attempt, after the table is read again.
func (c *Client) dataCall(ctx context.Context, op string, b uint32, rw, idempotent bool,
	call func(ctx context.Context, dc datav1.DataServiceClient) error,
) error {
	// unknown is the first attempt of a write whose outcome is unknown:
	// a write retried under the same request id is applied at most once,
	// wherever its bucket has moved meanwhile (a bucket's request ids move
	// with it), but if the call gives up, it must not say "nothing was
	// done".
	var last, unknown *Error
	giveUp := func(e *Error) *Error {
		if unknown != nil && rw {
			return outcomeUnknownAfter(true, unknown, e)
		}
		return e
	}
	attempts := c.cfg.Attempts
	if _, ok := ctx.Deadline(); ok && c.cfg.untilDeadline {
		attempts = math.MaxInt
	}
	policy := retry.Policy{Attempts: attempts, Backoff: retry.Backoff{Initial: c.cfg.RetryBackoff, Max: MaxRetryBackoff}}
	out, err := policy.Run(ctx, func(attempt int) (retry.Verdict, error) {
		rt := c.routingFor(ctx)
		rs, addr := c.addressFor(rt, b, rw)
		if addr == "" {
			cands := c.candidates()
			addr = cands[attempt%len(cands)]
		}
		conn, err := c.Conn(addr)
		if err != nil {
			return retry.Stop, err
		}
		actx, cancel := attemptContext(ctx, c.cfg.Timeout)
		err = call(actx, c.dataClient(addr, conn))
		expired := actx.Err() != nil
		cancel()
		if err == nil {
			c.mu.Lock()
			c.last = addr
			c.mu.Unlock()
			c.rt.unreachable.Answered(addr)
			return retry.Stop, nil
		}
		if ctx.Err() != nil {
			e := newError(op, addr, ctx.Err(), idempotent)
			e.Msg = fmt.Sprintf("no answer before the call's deadline: %s", e.Msg)
			return retry.Stop, giveUp(e)
		}
		if rd := datav1.RedirectOf(err); rd != nil {
			last = newError(op, addr, err, idempotent)
			last.Retryable = true // a redirect did nothing
			switch rd.GetReason() {
			case datav1.Redirect_REASON_NOT_LEADER:
				if l := rd.GetLeaderAddress(); l != "" && l != addr {
					c.learnLeader(firstOf(rd.GetReplicasetId(), rs), l)
					return retry.Follow, last
				}
				c.learnLeader(firstOf(rd.GetReplicasetId(), rs), "")
			default:
				// The bucket may have moved on: when the table, refreshed,
				// places it elsewhere, go there now.
				if rt, err := c.refresh(ctx); err == nil && rs != "" {
					if now, _ := c.addressFor(rt, b, rw); now != "" && now != rs {
						return retry.Follow, last
					}
				}
			}
			return retry.Again, last
		}
		e := newError(op, addr, err, idempotent)
		if expired && status.Code(err) == codes.DeadlineExceeded {
			e.Msg = fmt.Sprintf("did not answer within %v", c.cfg.Timeout)
		}
		if !e.Retryable {
			return retry.Stop, giveUp(e)
		}
		if unknown == nil && errors.Is(e, ErrOutcomeUnknown) {
			unknown = e
		}
		last = e
		if expired || notReached(err) {
			// The instance may be gone: the next attempt asks another
			// member (addressFor passes this one over for retry.PassOver).
			c.rt.unreachable.Mark(addr)
		}
		if rw && rs != "" {
			// The leader we knew may be gone: ask the replicaset's members.
			c.learnLeader(rs, "")
		}
		c.log.Debug("data call not served; retrying", "op", op, "peer", addr, "err", e.Msg)
		return retry.Again, last
	})
	switch {
	case out == retry.Stopped:
		return err
	case last == nil:
		return newError(op, "", context.DeadlineExceeded, idempotent)
	case out == retry.Exhausted:
		last.Msg = fmt.Sprintf("%s (gave up after %d attempts)", last.Msg, attempts)
	}
	return giveUp(last)
}

// notReached reports whether an attempt's error says that the instance
// asked could not be reached or went away (gRPC's own words for a
// connection that failed or broke), not that it answered with a refusal:
// an instance that answers "forwarded to B, which is unavailable" is
// alive, B is not.
func notReached(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || strings.HasPrefix(st.Message(), "forwarded to ") {
		return false
	}
	for _, s := range []string{"connection error", "error reading from server", "transport is closing", "connection refused"} {
		if strings.Contains(st.Message(), s) {
			return true
		}
	}
	return false
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// attemptContext bounds one attempt by timeout: ctx itself when its own
// deadline comes first (the usual case of a caller with a per-call
// deadline: no second timer, no child context to register with ctx), else
// a child of ctx with the attempt's deadline.
func attemptContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= timeout {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, timeout)
}

func noCancel() {}
