package cache

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/shardkit/shardkit/cache/lease"
)

// attemptResult is one host's final outcome within a Get.
type attemptResult[ID comparable, V any] struct {
	h          *host
	ids        []ID
	values     map[ID]V
	allMatched bool
	shard      Shard
	err        error
}

// pendingKey is a key without an answer: its sharding key and how many
// in-flight requests carry it.
type pendingKey[K any] struct {
	key   K
	skey  uint64
	cover int
}

// getState is one Get's bookkeeping; only the Get's goroutine touches it.
type getState[K any, ID comparable, V any] struct {
	pending map[ID]pendingKey[K] // keys without an answer yet
	result  map[ID]V
	asked   map[*host]bool
	failed  map[*host]bool
	causes  map[string]error
	hedged  bool // the hedge delay has passed
}

// Get returns the values of keys by entry id (SPEC C1, C8–C10). It sends
// each host the keys of its shard, returns as soon as every key has an
// answer, and cancels the requests still in flight. A key answered without
// a value is absent from the map. Keys that end without an answer make a
// *MissingKeysError (errors.Is ErrMissingKeys) naming their ids; the
// returned map then holds the keys that were answered.
func (c *Client[K, ID, V, Req, Resp]) Get(ctx context.Context, keys []K) (map[ID]V, error) {
	start := c.opts.Clock.Now()
	res, err := c.get(ctx, keys)
	c.metrics.getLatency.Observe(c.opts.Clock.Now().Sub(start).Seconds())
	if err != nil {
		c.metrics.gets.WithLabelValues("missing").Inc()
	} else {
		c.metrics.gets.WithLabelValues("ok").Inc()
	}
	return res, err
}

func (c *Client[K, ID, V, Req, Resp]) get(ctx context.Context, keys []K) (map[ID]V, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	g := &getState[K, ID, V]{
		pending: make(map[ID]pendingKey[K], len(keys)),
		result:  make(map[ID]V, len(keys)),
		asked:   map[*host]bool{},
		failed:  map[*host]bool{},
		causes:  map[string]error{},
	}
	for _, k := range keys {
		g.pending[c.desc.EntryID(k)] = pendingKey[K]{key: k, skey: c.desc.ShardingKey(k)}
	}
	if len(g.pending) == 0 {
		return g.result, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.GetTimeout)
		defer cancel()
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel() // cancels what is still in flight when Get returns
	results := make(chan attemptResult[ID, V])
	inflight := 0

	var hedgeC <-chan time.Time
	if c.opts.HedgeDelay > 0 {
		t := time.NewTimer(c.opts.HedgeDelay)
		defer t.Stop()
		hedgeC = t.C
	}
	first := true
	for {
		launched := c.launch(gctx, g, results, first)
		first = false
		inflight += launched
		if len(g.pending) == 0 {
			return g.result, nil
		}
		if inflight == 0 {
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return g.result, ErrClosed
			}
			unrouted := c.unrouted(g)
			if len(unrouted) == 0 {
				return g.result, g.missing(nil, nil)
			}
			// Keys no known server holds: wait for the shard map to change
			// (or ShardWait) and look again until the deadline.
			c.kickRefresh()
			c.mu.Lock()
			changed := c.changed
			c.mu.Unlock()
			wait := time.NewTimer(c.opts.ShardWait)
			select {
			case <-changed:
			case <-wait.C:
			case <-ctx.Done():
				wait.Stop()
				return g.result, g.missing(unrouted, ctx.Err())
			}
			wait.Stop()
			continue
		}
		select {
		case r := <-results:
			inflight--
			c.take(g, r)
		case <-hedgeC:
			hedgeC = nil
			g.hedged = true
		case <-ctx.Done():
			return g.result, g.missing(c.unrouted(g), ctx.Err())
		}
	}
}

// candidate is a host not yet asked in this Get that holds pending keys.
type candidate[ID comparable] struct {
	h       *host
	ids     []ID
	ejected bool
	lat     time.Duration
}

// launch starts the requests the Get needs now and returns how many. In
// send-to-all mode (HedgeDelay 0) and after the hedge delay (budget
// permitting) every unasked holder of pending keys gets them; otherwise
// only keys no in-flight request carries go to the fastest holder.
func (c *Client[K, ID, V, Req, Resp]) launch(ctx context.Context, g *getState[K, ID, V],
	results chan<- attemptResult[ID, V], first bool,
) int {
	now := c.opts.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	var cands []candidate[ID]
	anyEjected := false
	for _, h := range c.hosts {
		if !h.known || g.failed[h] || g.asked[h] {
			continue
		}
		var ids []ID
		for id, p := range g.pending {
			if h.shard.Contains(p.skey) {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 {
			ejected := now.Before(h.ejectedUntil)
			anyEjected = anyEjected || ejected
			cands = append(cands, candidate[ID]{h: h, ids: ids, ejected: ejected, lat: h.ewma})
		}
	}
	if anyEjected {
		cands = c.dropEjected(g, cands, now)
	}
	if first {
		ranges := map[lease.Range]bool{}
		for _, cd := range cands {
			ranges[cd.h.shard.Range()] = true
		}
		c.metrics.logical.Add(float64(len(ranges)))
	}
	rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	slices.SortStableFunc(cands, func(a, b candidate[ID]) int { return cmp.Compare(a.lat, b.lat) })

	all := c.opts.HedgeDelay == 0 || (g.hedged && c.budget.allow())
	n := 0
	for _, cd := range cands {
		ids := cd.ids
		if !all {
			ids = slices.DeleteFunc(slices.Clone(ids), func(id ID) bool { return g.pending[id].cover > 0 })
			if len(ids) == 0 {
				continue
			}
		}
		kind := kindGet
		if c.opts.HedgeDelay > 0 {
			kind = kindHedge
			for _, id := range ids {
				if g.pending[id].cover == 0 {
					kind = kindGet
				}
			}
		}
		keys := make([]K, len(ids))
		for i, id := range ids {
			p := g.pending[id]
			p.cover++
			g.pending[id] = p
			keys[i] = p.key
		}
		g.asked[cd.h] = true
		h := cd.h
		// Counted here, not in the goroutine: a Get that returns has
		// counted every request it launched.
		c.metrics.request(h.ep, kind)
		c.wg.Go(func() { c.attempt(ctx, h, keys, ids, results) })
		n++
	}
	return n
}

// dropEjected removes ejected candidates unless they hold a key that no
// live (not ejected, not failed) replica holds.
func (c *Client[K, ID, V, Req, Resp]) dropEjected(g *getState[K, ID, V], cands []candidate[ID], now time.Time) []candidate[ID] {
	live := map[ID]bool{}
	for _, h := range c.hosts {
		if !h.known || g.failed[h] || now.Before(h.ejectedUntil) {
			continue
		}
		for id, p := range g.pending {
			if h.shard.Contains(p.skey) {
				live[id] = true
			}
		}
	}
	return slices.DeleteFunc(cands, func(cd candidate[ID]) bool {
		if !cd.ejected {
			return false
		}
		for _, id := range cd.ids {
			if !live[id] {
				return false
			}
		}
		return true
	})
}

// unrouted returns the pending ids no known host holds (asked or not):
// their shard's holder is unknown, so waiting for the map may help.
func (c *Client[K, ID, V, Req, Resp]) unrouted(g *getState[K, ID, V]) []ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ID
	for id, p := range g.pending {
		held := false
		for _, h := range c.hosts {
			if h.known && h.shard.Contains(p.skey) {
				held = true
				break
			}
		}
		if !held {
			out = append(out, id)
		}
	}
	return out
}

// take merges one host's outcome into the Get.
func (c *Client[K, ID, V, Req, Resp]) take(g *getState[K, ID, V], r attemptResult[ID, V]) {
	for _, id := range r.ids {
		if p, ok := g.pending[id]; ok {
			p.cover--
			g.pending[id] = p
		}
	}
	if r.err == nil && r.allMatched {
		used := false
		for _, id := range r.ids {
			if _, ok := g.pending[id]; !ok {
				continue
			}
			if v, ok := r.values[id]; ok {
				g.result[id] = v
			}
			delete(g.pending, id)
			used = true
		}
		if used {
			c.metrics.answer(r.h.ep, useUsed)
		} else {
			c.metrics.answer(r.h.ep, useWasted)
		}
		return
	}
	g.failed[r.h] = true
	if r.err == nil {
		g.causes[r.h.ep.Addr] = fmt.Errorf("answered all_matched=false: it holds %v", r.shard)
		c.metrics.answer(r.h.ep, useWrongShard)
		return
	}
	g.causes[r.h.ep.Addr] = r.err
	c.metrics.answer(r.h.ep, useError)
}

func (g *getState[K, ID, V]) missing(unrouted []ID, deadline error) error {
	ids := make([]ID, 0, len(g.pending))
	for id := range g.pending {
		ids = append(ids, id)
	}
	return &MissingKeysError[ID]{IDs: ids, Unrouted: unrouted, Causes: g.causes, Deadline: deadline}
}

// attempt asks one host for keys, retrying it alone, and reports to the
// Get unless the Get has ended.
func (c *Client[K, ID, V, Req, Resp]) attempt(ctx context.Context, h *host, keys []K, ids []ID,
	results chan<- attemptResult[ID, V],
) {
	r := attemptResult[ID, V]{h: h, ids: ids}
	r.values, r.shard, r.allMatched, r.err = c.call(ctx, h, keys)
	if r.err != nil && ctx.Err() != nil {
		c.metrics.answer(h.ep, useCancelled)
		return
	}
	select {
	case results <- r:
	case <-ctx.Done():
		c.metrics.answer(h.ep, useWasted)
	}
}

func (c *Client[K, ID, V, Req, Resp]) call(ctx context.Context, h *host, keys []K) (map[ID]V, Shard, bool, error) {
	req := newMessage[Req]()
	if err := c.desc.Serialize(keys, req); err != nil {
		return nil, Shard{}, false, fmt.Errorf("cache: Serialize: %w", err)
	}
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			c.metrics.request(h.ep, kindRetry)
		}
		actx, cancel := context.WithTimeout(ctx, c.opts.HostTimeout)
		resp := newMessage[Resp]()
		start := c.opts.Clock.Now()
		err := h.conn.Invoke(actx, c.desc.Method, req, resp)
		cancel()
		lat := c.opts.Clock.Now().Sub(start)
		if err == nil {
			values := make(map[ID]V, len(keys))
			shard, all, derr := c.desc.Deserialize(resp, values)
			if derr != nil {
				err = fmt.Errorf("%w: %w", ErrBadAnswer, derr)
				c.failed(h, err)
				c.budget.failure()
				return nil, Shard{}, false, err
			}
			fresh := c.observe(h, shard)
			c.succeeded(h, lat, false)
			c.budget.success()
			if !fresh {
				// A newer holder of this range is known: h's lease is gone
				// and its values may be out of date. observe has taken h
				// off the map, so the keys go to the current holder.
				return nil, Shard{}, false, fmt.Errorf("%w: stale epoch %d of %v (a newer one is known in %s)",
					ErrBadAnswer, shard.Epoch, shard.Range(), h.ep.DC)
			}
			return values, shard, all, nil
		}
		if ctx.Err() != nil {
			c.slowerThan(h, lat)
			return nil, Shard{}, false, ctx.Err()
		}
		c.failed(h, err)
		if !retryable(err) {
			return nil, Shard{}, false, err
		}
		c.budget.failure()
		if attempt >= c.opts.MaxAttempts || !c.budget.allow() {
			return nil, Shard{}, false, err
		}
		backoff := min(c.opts.BackoffMax, c.opts.BackoffBase<<(attempt-1))
		t := time.NewTimer(rand.N(backoff + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, Shard{}, false, ctx.Err()
		case <-t.C:
		}
	}
}
