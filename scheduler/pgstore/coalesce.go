package pgstore

import (
	"context"
	"sync"
)

// maxCoalesced bounds the calls that one coalesced query answers.
const maxCoalesced = 256

// coalescer gathers concurrent calls of one kind (Load, Check) into one
// query: a call that finds no query of its kind in flight goes at once;
// the calls that come while one is in flight wait for it and go together
// in the next. A runner's concurrent Process calls and the marks it passes
// on then cost a query per batch instead of a round trip each. A call's
// answer is read after the call began, as it would be alone.
type coalescer[K, V any] struct {
	query func(ctx context.Context, keys []K) ([]V, error)

	mu      sync.Mutex
	pending []*coalescedCall[K, V]
	busy    bool
}

type coalescedCall[K, V any] struct {
	key  K
	val  V
	err  error
	done chan struct{}
}

// do answers one call, with the answer of the query that carried it.
func (c *coalescer[K, V]) do(ctx context.Context, key K) (V, error) {
	call := &coalescedCall[K, V]{key: key, done: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, call)
	start := !c.busy
	c.busy = true
	c.mu.Unlock()
	if start {
		// The queries outlive a caller that gives up: others wait on them.
		go c.flush(context.WithoutCancel(ctx))
	}
	select {
	case <-call.done:
		return call.val, call.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// flush runs queries until no call is pending.
func (c *coalescer[K, V]) flush(ctx context.Context) {
	for {
		c.mu.Lock()
		calls := c.pending
		if len(calls) == 0 {
			c.busy = false
			c.mu.Unlock()
			return
		}
		n := min(len(calls), maxCoalesced)
		c.pending = calls[n:]
		calls = calls[:n]
		c.mu.Unlock()
		keys := make([]K, n)
		for i, call := range calls {
			keys[i] = call.key
		}
		vals, err := c.query(ctx, keys)
		for i, call := range calls {
			if err != nil {
				call.err = err
			} else {
				call.val = vals[i]
			}
			close(call.done)
		}
	}
}
