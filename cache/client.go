package cache

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/shardkit/shardkit/cache/lease"
)

// Client is the typed fan-out client of a sharded cache service (SPEC
// C1, C7–C10). It is safe for concurrent use; Close it when done.
type Client[K any, ID comparable, V any, Req, Resp proto.Message] struct {
	desc    Description[K, ID, V, Req, Resp]
	opts    Options
	metrics *clientMetrics
	budget  *budget

	mu       sync.Mutex
	hosts    map[string]*host // by address
	maxEpoch map[dcRange]uint64
	changed  chan struct{} // closed and replaced on every shard-map change
	closed   bool

	kick chan struct{} // asks the refresher to run now
	stop context.CancelFunc
	wg   sync.WaitGroup // the refresher and every request goroutine
}

type dcRange struct {
	dc string
	r  lease.Range
}

// host is one server. Its fields below conn are guarded by Client.mu.
type host struct {
	ep   Endpoint
	conn *grpc.ClientConn

	shard        Shard
	known        bool // shard is what the host last said and not superseded
	consecFail   int
	ejections    int
	ejectedUntil time.Time
	ewma         time.Duration // smoothed latency of its answers
	hasEWMA      bool
	gone         bool // removed from the resolver's list
}

// New starts a client: it resolves the hosts and pings them once (bounded
// by ctx and HostTimeout), then keeps refreshing every PingPeriod until
// Close.
func New[K any, ID comparable, V any, Req, Resp proto.Message](ctx context.Context,
	desc Description[K, ID, V, Req, Resp], opts Options,
) (*Client[K, ID, V, Req, Resp], error) {
	if err := desc.validate(); err != nil {
		return nil, err
	}
	if err := opts.fill(); err != nil {
		return nil, err
	}
	c := &Client[K, ID, V, Req, Resp]{
		desc:     desc,
		opts:     opts,
		metrics:  newClientMetrics(opts.Registerer),
		budget:   newBudget(opts.BudgetTokens, opts.BudgetRatio),
		hosts:    map[string]*host{},
		maxEpoch: map[dcRange]uint64{},
		changed:  make(chan struct{}),
		kick:     make(chan struct{}, 1),
	}
	if err := c.refresh(ctx); err != nil {
		c.closeHosts()
		return nil, err
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = stop
	c.wg.Go(func() { c.refreshLoop(loopCtx) })
	return c, nil
}

// Close stops the refresher, waits for in-flight requests to end and closes
// the connections.
func (c *Client[K, ID, V, Req, Resp]) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.stop()
	c.wg.Wait()
	c.closeHosts()
	return nil
}

func (c *Client[K, ID, V, Req, Resp]) closeHosts() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, h := range c.hosts {
		h.conn.Close()
		delete(c.hosts, addr)
	}
}

func (c *Client[K, ID, V, Req, Resp]) refreshLoop(ctx context.Context) {
	t := time.NewTicker(c.opts.PingPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		if err := c.refresh(ctx); err != nil && ctx.Err() == nil {
			c.opts.Logger.Warn("cache client refresh failed; keeping the previous hosts", "err", err)
		}
	}
}

// kickRefresh asks the refresher to run now (at most one pending kick).
func (c *Client[K, ID, V, Req, Resp]) kickRefresh() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// refresh resolves the hosts, then pings every host with an empty Get and
// learns its shard.
func (c *Client[K, ID, V, Req, Resp]) refresh(ctx context.Context) error {
	eps, rerr := c.opts.Resolver.Resolve(ctx)
	if rerr == nil {
		if err := c.setHosts(eps); err != nil {
			rerr = err
		}
	}
	if rerr != nil {
		c.metrics.resolveErrors.Inc()
	}
	c.mu.Lock()
	hosts := make([]*host, 0, len(c.hosts))
	for _, h := range c.hosts {
		hosts = append(hosts, h)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() { c.ping(ctx, h) })
	}
	wg.Wait()
	if rerr != nil {
		return fmt.Errorf("cache: resolve hosts: %w", rerr)
	}
	return nil
}

func (c *Client[K, ID, V, Req, Resp]) setHosts(eps []Endpoint) error {
	want := make(map[string]Endpoint, len(eps))
	for _, ep := range eps {
		if err := ep.validate(); err != nil {
			return err
		}
		want[ep.Addr] = ep
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	changed := false
	for addr, h := range c.hosts {
		if ep, ok := want[addr]; !ok || ep.DC != h.ep.DC {
			h.gone = true
			h.conn.Close()
			delete(c.hosts, addr)
			c.metrics.forgetHost(h.ep)
			changed = true
		}
	}
	for addr, ep := range want {
		if _, ok := c.hosts[addr]; ok {
			continue
		}
		conn, err := grpc.NewClient(addr, c.opts.DialOptions...)
		if err != nil {
			return fmt.Errorf("cache: dial %s: %w", addr, err)
		}
		c.hosts[addr] = &host{ep: ep, conn: conn}
		changed = true
	}
	if changed {
		c.notifyLocked()
	}
	return nil
}

func (c *Client[K, ID, V, Req, Resp]) ping(ctx context.Context, h *host) {
	req := newMessage[Req]()
	if err := c.desc.Serialize(nil, req); err != nil {
		c.opts.Logger.Error("cache client: Serialize of an empty Get failed", "err", err)
		return
	}
	resp := newMessage[Resp]()
	pctx, cancel := context.WithTimeout(ctx, c.opts.HostTimeout)
	start := c.opts.Clock.Now()
	c.metrics.request(h.ep, kindPing)
	err := h.conn.Invoke(pctx, c.desc.Method, req, resp)
	cancel()
	lat := c.opts.Clock.Now().Sub(start)
	if err == nil {
		var shard Shard
		shard, _, err = c.desc.Deserialize(resp, map[ID]V{})
		if err == nil {
			c.observe(h, shard)
			c.succeeded(h, lat, true)
			return
		}
		err = fmt.Errorf("%w: %w", ErrBadAnswer, err)
	}
	if ctx.Err() != nil {
		return // closing
	}
	c.failed(h, err)
}

// observe records that h says it holds s; it returns false when a newer
// epoch of the same range in h's datacenter is known (h's claim is stale).
// Nothing is recorded for a host that is gone.
func (c *Client[K, ID, V, Req, Resp]) observe(h *host, s Shard) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := dcRange{h.ep.DC, s.Range()}
	best, seen := c.maxEpoch[key]
	if seen && s.Epoch < best {
		if h.known && !h.gone {
			h.known = false
			c.notifyLocked()
		}
		return false
	}
	if h.gone {
		return true
	}
	if !seen || s.Epoch > best {
		if seen {
			c.metrics.epochChanges.WithLabelValues(h.ep.DC).Inc()
		}
		c.maxEpoch[key] = s.Epoch
		for _, o := range c.hosts {
			if o != h && o.known && o.ep.DC == h.ep.DC && o.shard.Range() == s.Range() && o.shard.Epoch < s.Epoch {
				o.known = false
			}
		}
	}
	if !h.known || h.shard != s {
		h.shard, h.known = s, true
		c.notifyLocked()
	}
	return true
}

// forget drops what h said about its shard (it refused: no lease).
func (c *Client[K, ID, V, Req, Resp]) forget(h *host) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.known {
		h.known = false
		c.notifyLocked()
	}
}

func (c *Client[K, ID, V, Req, Resp]) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

const ewmaWeight = 0.3

func (c *Client[K, ID, V, Req, Resp]) succeeded(h *host, lat time.Duration, unEject bool) {
	c.metrics.latency(h.ep, lat)
	c.mu.Lock()
	defer c.mu.Unlock()
	h.consecFail = 0
	if unEject {
		h.ejectedUntil = time.Time{}
	}
	c.addLatencyLocked(h, lat)
}

func (c *Client[K, ID, V, Req, Resp]) addLatencyLocked(h *host, lat time.Duration) {
	if !h.hasEWMA {
		h.ewma, h.hasEWMA = lat, true
		return
	}
	h.ewma += time.Duration(ewmaWeight * float64(lat-h.ewma))
}

// slowerThan records that h had not answered after d (its request was
// cancelled because other replicas were faster).
func (c *Client[K, ID, V, Req, Resp]) slowerThan(h *host, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !h.hasEWMA || d > h.ewma {
		c.addLatencyLocked(h, d)
	}
}

func (c *Client[K, ID, V, Req, Resp]) failed(h *host, err error) {
	if status.Code(err) == codes.FailedPrecondition {
		// No lease: not a health problem (a spare server says so to every
		// ping), so it does not count towards ejection.
		c.forget(h)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h.consecFail++
	now := c.opts.Clock.Now()
	if h.consecFail >= c.opts.EjectAfter && !now.Before(h.ejectedUntil) {
		h.ejections++
		d := min(c.opts.EjectBase*time.Duration(h.ejections), c.opts.EjectMax)
		h.ejectedUntil = now.Add(d)
		h.consecFail = 0
		c.metrics.ejections.WithLabelValues(h.ep.DC, h.ep.Addr).Inc()
		c.opts.Logger.Warn("cache client: host ejected after consecutive failures", "host", h.ep.Addr, "dc", h.ep.DC, "for", d.String(), "err", err)
	}
}

// retryable reports whether a failed attempt may be tried again on the same
// host.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}
