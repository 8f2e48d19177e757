package replicaset

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/time/rate"
)

// copyPace paces the copy of moved buckets into this replicaset: the
// bytes of tuples (key and tuple) its ReceiveBuckets calls propose per
// second, all of them together (StorageConfig.CopyRate, the rebalancer's
// copy rate; `shardkit rebalance config --copy-rate`). A copy competes with
// the clients' writes for the same cores and disks; the pace is how an
// operator trades a rebalance's speed for the clients' latency while it
// runs. It counts bytes proposed, not bytes streamed: the stream waits
// while a chunk waits (gRPC's flow control holds the source back).
//
// The rate is read before each part of a chunk, so a change applies to
// the copies under way. Zero means no limit. With elastic, the pace is
// elastic's within that rate (the operator's bound), unless off says the
// operator turned it off (`rebalance config --copy-pace off`), read as
// often as the rate.
type copyPace struct {
	rate    func() uint64 // bytes per second; nil or 0: no limit
	off     func() bool   // nil: never off
	elastic *elasticPace  // nil: the rate alone

	mu   sync.Mutex
	lim  *rate.Limiter
	last uint64 // the rate lim was set to
}

// copyBurst is how many bytes the pace lets through at once: an eighth of
// a second's worth, and at least minCopyBurst. A chunk larger than that
// waits in pieces; a whole chunk (MaxChunkBytes) as the least would let
// a small copy (a demo's, a test's) through at once at any rate.
func copyBurst(bytesPerS uint64) int {
	return int(max(bytesPerS/8, minCopyBurst))
}

// minCopyBurst is the least burst of a copy rate (16 KiB: a rate of
// 16KiB/s lets 16 KiB through at once, then 16 KiB a second).
const minCopyBurst = 16 << 10

// limiter returns the limiter for the rate now, nil when there is no limit.
func (p *copyPace) limiter() *rate.Limiter {
	r := p.bound()
	if !p.isOff() {
		r = p.elastic.pace(r)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r == 0 {
		p.lim, p.last = nil, 0
		return nil
	}
	switch {
	case p.lim == nil:
		p.lim = rate.NewLimiter(rate.Limit(r), copyBurst(r))
	case r != p.last:
		p.lim.SetLimit(rate.Limit(r))
		p.lim.SetBurst(copyBurst(r))
	}
	p.last = r
	return p.lim
}

// wait returns when n more bytes may be copied, or with ctx's error.
// The limiter is read again for each part of at most a burst, so a pace
// that changes applies within the chunk.
func (p *copyPace) wait(ctx context.Context, n int) error {
	for n > 0 {
		lim := p.limiter()
		if lim == nil {
			p.copied(n)
			return nil
		}
		k := min(n, lim.Burst())
		if err := lim.WaitN(ctx, k); err != nil {
			return fmt.Errorf("waiting for the pace (%.0f bytes/s): %w", float64(lim.Limit()), err)
		}
		p.copied(k)
		n -= k
	}
	return nil
}

func (p *copyPace) copied(n int) {
	if !p.isOff() {
		p.elastic.copied(n)
	}
}

// copiedBuckets counts a copy that took bytes for n buckets copied whole,
// for the receive window's bucket size.
func (p *copyPace) copiedBuckets(bytes int64, n int) {
	if !p.isOff() {
		p.elastic.copiedBuckets(bytes, n)
	}
}

// receiveWindow is the buckets the copy takes at once at the pace now
// (elasticPace.receiveWindow); 0: no bound but the quotas, always when the
// rate alone paces the copy.
func (p *copyPace) receiveWindow() uint32 {
	if p.isOff() {
		return 0
	}
	return p.elastic.receiveWindow(p.bound())
}

// bound is the operator's rate (--copy-rate; 0: none).
func (p *copyPace) bound() uint64 {
	if p.rate == nil {
		return 0
	}
	return p.rate()
}

// isOff says whether the rate alone paces the copy: no elastic pace, or
// the operator turned it off.
func (p *copyPace) isOff() bool {
	return p.elastic == nil || p.off != nil && p.off()
}
