package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardkit/shardkit/retry"
)

// DefaultTimeout bounds one attempt on one instance when Config.Timeout is
// zero.
const DefaultTimeout = 10 * time.Second

// LeaderHeader is the response header in which an instance names the
// address of the group-0 leader it forwarded a call to (or its own, when it
// leads). A Client asks that address first next time.
const LeaderHeader = "x-shardkit-leader"

// Config configures a Client.
type Config struct {
	// Peers are host:port addresses of instances of the cluster; any will
	// do, at least one is needed. More than one lets a call go on when an
	// instance does not answer.
	Peers []string
	// Credentials secure the connections (see DialOptions); nil means
	// plaintext, for a cluster started without certificates.
	Credentials credentials.TransportCredentials
	// DialOptions are added after DialOptions(Credentials).
	DialOptions []grpc.DialOption
	// Timeout bounds one attempt on one instance (DefaultTimeout when
	// zero); the context given to a call bounds the call as a whole. An
	// attempt gets more when the call's deadline leaves more for each of
	// the instances still to try (those before it refused at once).
	Timeout time.Duration
	// Logger receives a debug line for each attempt that failed over to
	// another instance (discarded when nil).
	Logger *slog.Logger
	// FailureDomain is where this client runs (e.g. dc=msk): an ro read
	// goes to the replica sharing the most of it, a follower rather than
	// the leader where one is as near (sharding.Nearest; R2, R6).
	FailureDomain map[string]string
	// Attempts bounds how many times one data call is tried (a redirect,
	// an instance that does not answer). When zero, a call whose context
	// has a deadline is tried until that deadline (an instance refusing
	// connections, a redirect or a leader election do not use the call
	// up), and one without a deadline DefaultAttempts times. The call's
	// context bounds it too.
	Attempts int
	// RetryBackoff is the first wait before a data call is tried again
	// (DefaultRetryBackoff when zero); it doubles at each try, up to
	// MaxRetryBackoff (or stays as set when larger). A redirect to where
	// the routing table, just refreshed, now places the bucket is followed
	// at once, without a wait. A bucket in its move's switch is waited out
	// by the router the call reaches, not here (package retry): a
	// REASON_BUCKET_MOVING that reaches the client is retried as any
	// other refusal, counted against Attempts.
	RetryBackoff time.Duration
	// DisablePipelining turns off client pipelining: each write and point
	// read is then its own unary call. With it on (the default), they go
	// on one data stream per instance (DisableStream below), or, without
	// the stream, point reads made concurrently on this Client to the same
	// instance share Multi calls when more than PipelineDepth of them are
	// under way; each still gets its own answer and error, exactly as
	// alone.
	DisablePipelining bool
	// PipelineWrites lets writes into the Multi pipeline too (when it is
	// on, and the data stream is not used: DisableStream).
	// Off by default: a write is its own Raft proposal either way, so a
	// Multi saves it only its RPC, and waiting for a free slot of the
	// pipeline costs it more (64 concurrent writers on 16 Clients did
	// 9-31% more writes a second with writes unpipelined; at 256, 2-5%;
	// docs/benchmarks.md, "Writes out of the pipeline").
	PipelineWrites bool
	// DisableStream sends writes and point reads as the pipeline does
	// without a stream (a unary call each, point reads batched in Multi
	// calls). With it off (the default, and pipelining on), they go on one
	// gRPC stream per instance (DataService.Stream): each call an item of
	// the stream, answered by its id, the calls made together sent
	// together, none of a unary call's per-call HTTP/2 stream, headers
	// and handler set-up; each still gets its own answer and error,
	// exactly as alone. An instance without Stream gets the pipeline's
	// calls (docs/data.md, "Pipelining"; docs/benchmarks.md, "A data
	// stream per connection").
	DisableStream bool
	// PipelineDepth is how many calls (unary or Multi) the Multi pipeline
	// (without the data stream: DisableStream) has
	// under way to one instance at a time (DefaultPipelineDepth when
	// zero). Smaller: larger Multis, fewer RPCs, a call may wait for one
	// in flight to end; larger: more RPCs in parallel. 1 suits tens of
	// goroutines per Client on a CPU-bound host; with a few it makes them
	// take turns (docs/benchmarks.md, "Writes out of the pipeline").
	PipelineDepth int

	// untilDeadline: Attempts was left zero, so a call with a deadline is
	// tried until it.
	untilDeadline bool
}

// DefaultAttempts is how many times a data call without a deadline is
// tried when Config.Attempts is zero.
const DefaultAttempts = 8

// DefaultRetryBackoff is Config.RetryBackoff's default, and
// MaxRetryBackoff the longest wait it doubles to.
const (
	DefaultRetryBackoff = 10 * time.Millisecond
	MaxRetryBackoff     = 500 * time.Millisecond
)

// Client talks to one cluster. Make it with New; it is safe for
// concurrent use; Close it when done.
type Client struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	pipes  map[string]*pipe // per address, pipelining's queues
	leader string           // the group-0 leader's address, as last named by an answer
	last   string           // the instance that last answered
	closed bool

	rt router // the data layer's routing table
}

// New makes a client of the cluster whose instances include cfg.Peers. It
// does not contact the cluster: connections are made by the first call
// that needs them, so a client can be made before the cluster is up. ctx
// is not retained.
func New(_ context.Context, cfg Config) (*Client, error) {
	if len(cfg.Peers) == 0 {
		return nil, fmt.Errorf("%w: no peers: give at least one instance's host:port", ErrInvalid)
	}
	var peers []string
	for _, p := range cfg.Peers {
		if err := CheckAddress(p); err != nil {
			return nil, err
		}
		if !slices.Contains(peers, p) {
			peers = append(peers, p)
		}
	}
	cfg.Peers = peers
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts, cfg.untilDeadline = DefaultAttempts, true
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.PipelineDepth <= 0 {
		cfg.PipelineDepth = DefaultPipelineDepth
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, log: log, conns: map[string]*grpc.ClientConn{}, pipes: map[string]*pipe{}}, nil
}

// Peers returns the configured instance addresses.
func (c *Client) Peers() []string { return slices.Clone(c.cfg.Peers) }

// Close closes every connection. Calls after Close fail with ErrUnavailable.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for a, conn := range c.conns {
		errs = append(errs, conn.Close())
		delete(c.conns, a)
		delete(c.pipes, a)
	}
	return errors.Join(errs...)
}

// Conn returns the connection to one instance, made on first use. Code
// that needs a service of the instance that Client does not wrap (the
// cache template's own services, say) uses it; the Client keeps owning it.
func (c *Client) Conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &Error{Op: "dial", Peer: addr, Code: codes.Unavailable, Msg: "client is closed", kind: ErrUnavailable}
	}
	if conn := c.conns[addr]; conn != nil {
		return conn, nil
	}
	conn, err := Dial(addr, c.cfg.Credentials, c.cfg.DialOptions...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = conn
	return conn, nil
}

// candidates returns the instances to try, in order: the leader named by
// an earlier answer, the instance that answered last, then the configured
// peers.
func (c *Client) candidates() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.cfg.Peers)+2)
	for _, a := range []string{c.leader, c.last} {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, a := range c.cfg.Peers {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// learn keeps what an answer says about where to ask next.
func (c *Client) learn(addr string, hdr metadata.MD, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := hdr.Get(LeaderHeader); len(v) > 0 && CheckAddress(v[0]) == nil {
		c.leader = v[0]
	}
	switch status.Code(err) {
	case codes.OK:
		c.last = addr
	case codes.Unavailable:
		if c.leader == addr {
			c.leader = ""
		}
		if c.last == addr {
			c.last = ""
		}
	}
}

// CallFunc makes one attempt of a call on one instance: it must pass opts
// to the gRPC call (they collect the instance's hints).
type CallFunc func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error

// Do runs call as this Client runs its own calls: on the instance an
// earlier answer named first, then on the others in turn while they are
// unavailable (or, when idempotent is true, while an attempt's outcome is
// unknown), each attempt bounded by Config.Timeout. op names the call in
// errors. It is for services the Client does not wrap.
func (c *Client) Do(ctx context.Context, op string, idempotent bool, call CallFunc) error {
	return c.invoke(ctx, op, callOptions{idempotent: idempotent}, call)
}

// callOptions tune one call.
type callOptions struct {
	// idempotent: repeating the call has the effect of doing it once, so
	// an attempt whose outcome is unknown may be repeated elsewhere.
	idempotent bool
	// timeout overrides Config.Timeout for each attempt (0: keep it).
	timeout time.Duration
}

// attemptShare is how long an attempt may take with left instances still
// to try (this one included): timeout, or an equal part of what the
// call's deadline leaves when that is more, so that the time instances
// before it did not use (they refused at once) is not lost.
func attemptShare(ctx context.Context, timeout time.Duration, left int) time.Duration {
	if dl, ok := ctx.Deadline(); ok && left > 0 {
		return max(timeout, time.Until(dl)/time.Duration(left))
	}
	return timeout
}

// invoke runs call on the candidates in turn until one gives an answer
// that is not "unavailable" (nor, for an idempotent call, "no answer in
// time"), and returns that answer as an error or nil: retry.Policy, each
// candidate once, going on to the next at once.
func (c *Client) invoke(ctx context.Context, op string, o callOptions, call CallFunc) error {
	timeout := c.cfg.Timeout
	if o.timeout > 0 {
		timeout = o.timeout
	}
	var tried []string
	var last, unknown *Error // unknown: the first attempt whose outcome is unknown
	cands := c.candidates()
	served := false
	policy := retry.Policy{Attempts: len(cands)}
	out, err := policy.Run(ctx, func(i int) (retry.Verdict, error) {
		if i >= len(cands) || ctx.Err() != nil {
			return retry.Stop, nil // no candidate: the answer is made below
		}
		addr := cands[i]
		conn, err := c.Conn(addr)
		if err != nil {
			return retry.Stop, err
		}
		at := attemptShare(ctx, timeout, len(cands)-i)
		actx, cancel := attemptContext(ctx, at)
		var hdr metadata.MD
		err = call(actx, conn, grpc.Header(&hdr))
		attemptExpired := actx.Err() != nil
		cancel()
		c.learn(addr, hdr, err)
		if err == nil {
			served = true
			return retry.Stop, nil
		}
		e := newError(op, addr, err, o.idempotent)
		if ctx.Err() != nil {
			// The caller's deadline, not the attempt's: say so as it is.
			e = newError(op, addr, ctx.Err(), o.idempotent)
			e.Msg = fmt.Sprintf("no answer before the call's deadline: %s", e.Msg)
			return retry.Stop, e
		}
		if attemptExpired && status.Code(err) == codes.DeadlineExceeded {
			e.Msg = fmt.Sprintf("did not answer within %v", at.Round(time.Millisecond))
		}
		if !e.Retryable {
			if unknown != nil {
				return retry.Stop, outcomeUnknownAfter(false, unknown, e)
			}
			return retry.Stop, e
		}
		if unknown == nil && errors.Is(e, ErrOutcomeUnknown) {
			unknown = e
		}
		c.log.Debug("instance did not serve the call; trying the next", "op", op, "peer", addr, "err", e.Msg)
		tried = append(tried, addr)
		last = e
		return retry.Follow, e
	})
	switch {
	case served:
		return nil
	case out == retry.Stopped && err != nil:
		return err
	}
	if last == nil {
		return newError(op, "", ctx.Err(), o.idempotent)
	}
	if len(tried) > 1 {
		last.Msg = fmt.Sprintf("%s (tried %s)", last.Msg, strings.Join(tried, ", "))
	}
	if unknown != nil {
		return outcomeUnknownAfter(false, unknown, last)
	}
	return last
}
