package goals

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	goalsv1 "github.com/shardkit/shardkit/examples/goals/v1"
)

// LoadConfig drives RunLoad: Requests Gets of Batch demo hits each, from
// Concurrency goroutines.
type LoadConfig struct {
	Requests    int
	Concurrency int
	Batch       int
	Counters    int // demo counters the hits spread over
	PerCounter  int // demo goals per counter
	Timeout     time.Duration
	// Expected, when set, checks every answer against these rules.
	Expected *Rules
	// FirstHit numbers the hits (watch ids) from here.
	FirstHit int
}

// LoadResult is what RunLoad measured. Latencies are in microseconds.
type LoadResult struct {
	Latency    *hdrhistogram.Histogram
	Errors     int64
	Mismatches int64
	FirstError error
	Elapsed    time.Duration
}

// Summary is one line: count, p50/p99/p99.9/max in ms, errors.
func (r LoadResult) Summary() string {
	h := r.Latency
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	return fmt.Sprintf("gets=%d p50=%.3fms p99=%.3fms p99.9=%.3fms max=%.3fms errors=%d mismatches=%d elapsed=%v",
		h.TotalCount(), ms(50), ms(99), ms(99.9), float64(h.Max())/1000, r.Errors, r.Mismatches, r.Elapsed.Round(time.Millisecond))
}

// RunLoad sends the Gets and records their latencies.
func RunLoad(ctx context.Context, c *Client, cfg LoadConfig) LoadResult {
	cfg.Concurrency = max(cfg.Concurrency, 1)
	cfg.Batch = max(cfg.Batch, 1)
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	var (
		next       atomic.Int64
		mu         sync.Mutex
		res        = LoadResult{Latency: hdrhistogram.New(1, 60_000_000, 3)}
		wg         sync.WaitGroup
		errs, mism atomic.Int64
	)
	start := time.Now()
	for range cfg.Concurrency {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= cfg.Requests || ctx.Err() != nil {
					return
				}
				hits := make([]*goalsv1.Hit, cfg.Batch)
				for i := range hits {
					hits[i] = DemoHit(cfg.FirstHit+n*cfg.Batch+i, cfg.Counters, cfg.PerCounter)
				}
				gctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				t0 := time.Now()
				got, err := c.Get(gctx, hits)
				lat := time.Since(t0)
				cancel()
				mu.Lock()
				_ = res.Latency.RecordValue(max(lat.Microseconds(), 1)) // values beyond 60 s are clamped by the error below
				if err != nil && res.FirstError == nil {
					res.FirstError = err
				}
				mu.Unlock()
				if err != nil {
					errs.Add(1)
					continue
				}
				if cfg.Expected != nil {
					for _, h := range hits {
						if !Equal(got[h.GetWatchId()], cfg.Expected.Match(h.GetCounterId(), h.GetUrl())) {
							mism.Add(1)
							break
						}
					}
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Errors, res.Mismatches = errs.Load(), mism.Load()
	return res
}
