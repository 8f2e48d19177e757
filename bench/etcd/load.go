package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// maxTxnOps is etcd's default --max-txn-ops: the preload writes this many
// keys per transaction.
const maxTxnOps = 128

// newHist records latencies in microseconds, from 1 µs to 60 s or twice
// the call deadline, 3 significant digits.
func newHist(cfg config) *hdrhistogram.Histogram {
	return hdrhistogram.New(1, max(60_000_000, 2*cfg.timeout.Microseconds()), 3)
}

func key(worker, i int) string { return fmt.Sprintf("k/%d/%d", worker, i) }

// dial opens min(conns, clients) clients. As etcd's own benchmark tool does,
// each talks to one endpoint, the endpoints taken in turn, so the
// connections are spread over the members; worker w uses connection
// w mod conns.
func dial(cfg config) ([]*clientv3.Client, error) {
	n := min(cfg.conns, cfg.clients)
	clients := make([]*clientv3.Client, 0, n)
	for i := range n {
		ep := cfg.endpoints[i%len(cfg.endpoints)]
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{ep},
			DialTimeout: cfg.timeout,
			Logger:      zap.NewNop(),
		})
		if err == nil {
			// One linearizable read: the member answers and the cluster has a leader.
			ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
			_, err = c.Get(ctx, "etcd-bench/probe")
			cancel()
			if err != nil {
				c.Close()
			}
		}
		if err != nil {
			closeAll(clients)
			return nil, fmt.Errorf("endpoint %s unavailable: %w", ep, err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func closeAll(clients []*clientv3.Client) {
	for _, c := range clients {
		c.Close()
	}
}

func value(size int, rng *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, size)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return string(b)
}

// preload writes every key the get workers will read (clients × keys), in
// transactions of maxTxnOps puts, one writer per connection.
func preload(ctx context.Context, cfg config, clients []*clientv3.Client, stderr io.Writer) error {
	start := time.Now()
	total := cfg.clients * cfg.keys
	batches := make(chan []clientv3.Op)
	errc := make(chan error, len(clients))
	var wg sync.WaitGroup
	for ci, c := range clients {
		wg.Go(func() {
			for ops := range batches {
				err := preloadBatch(ctx, cfg, c, ops)
				if err != nil {
					errc <- fmt.Errorf("preload (connection %d): %w", ci, err)
					for range batches { // drain so that the producer ends
					}
					return
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	val := value(cfg.valueSize, rng)
	ops := make([]clientv3.Op, 0, maxTxnOps)
	for w := range cfg.clients {
		for i := range cfg.keys {
			ops = append(ops, clientv3.OpPut(key(w, i), val))
			if len(ops) == maxTxnOps {
				batches <- ops
				ops = make([]clientv3.Op, 0, maxTxnOps)
			}
		}
	}
	if len(ops) > 0 {
		batches <- ops
	}
	close(batches)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	fmt.Fprintf(stderr, "etcd-bench: preloaded %d keys (%d workers × %d) in %.1fs\n",
		total, cfg.clients, cfg.keys, time.Since(start).Seconds())
	return nil
}

// preloadBatch commits one transaction of puts, trying up to 3 times with
// a deadline of max(--timeout, 30s) each: a preload is not measured, and a
// busy machine should not fail it (the puts are idempotent).
func preloadBatch(ctx context.Context, cfg config, c *clientv3.Client, ops []clientv3.Op) error {
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * time.Second):
			}
		}
		cctx, cancel := context.WithTimeout(ctx, max(cfg.timeout, 30*time.Second))
		_, err = c.Txn(cctx).Then(ops...).Commit()
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// settle makes the members' storage drop the preload's write buffer before
// the timed part. etcd 3.4 copies its backend's read buffer for every read
// (fixed in 3.5 by etcd-io/etcd#12933), and that buffer keeps the capacity
// of the largest batch written since it was last emptied: after a preload
// of thousands of keys per 100 ms batch, far more than any timed workload
// writes, each Get copies hundreds of kilobytes, and a get run would measure
// the preload's after-effect (in a probe at 64 clients, 2.3k instead of 5-6k
// reads/s; more than half the leader's CPU in bucketBuffer.Copy). The
// buffer of the keys is dropped at the second backend commit (every 100 ms
// when something was written) that has no key in it, so: wait for the
// preload's last commit, then write twice to the lease bucket only (grant a
// lease), in two commit intervals, and revoke the leases. This changes no
// setting of etcd and leaves no data behind.
func settle(ctx context.Context, cfg config, c *clientv3.Client) error {
	const interval = 300 * time.Millisecond // > etcd's 100 ms backend batch interval
	var leases []clientv3.LeaseID
	for range 2 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
		cctx, cancel := context.WithTimeout(ctx, max(cfg.timeout, 30*time.Second))
		resp, err := c.Grant(cctx, 600)
		cancel()
		if err != nil {
			return fmt.Errorf("settle: lease grant: %w", err)
		}
		leases = append(leases, resp.ID)
	}
	time.Sleep(interval)
	for _, id := range leases {
		cctx, cancel := context.WithTimeout(ctx, max(cfg.timeout, 30*time.Second))
		_, err := c.Revoke(cctx, id)
		cancel()
		if err != nil {
			return fmt.Errorf("settle: lease revoke: %w", err)
		}
	}
	time.Sleep(interval)
	return nil
}

type workerResult struct {
	hist     *hdrhistogram.Histogram
	errors   int64
	firstErr error
}

// bench dials, preloads for get, then runs the workers for cfg.duration
// and merges what they measured. A worker starts no call after the
// duration; calls in flight then finish (or time out), and the elapsed
// time runs until the last of them has.
func bench(ctx context.Context, cfg config, stderr io.Writer) (result, error) {
	clients, err := dial(cfg)
	if err != nil {
		return result{}, err
	}
	defer closeAll(clients)
	if cfg.workload == "get" {
		if err := preload(ctx, cfg, clients, stderr); err != nil {
			return result{}, err
		}
		if cfg.settle {
			if err := settle(ctx, cfg, clients[0]); err != nil {
				return result{}, err
			}
		}
	}

	ws := startWatchers(ctx, cfg, clients)
	var done atomic.Int64 // successful calls, for the progress line
	results := make([]workerResult, cfg.clients)
	stopProgress := progress(stderr, &done, cfg)
	start := time.Now()
	deadline := start.Add(cfg.duration)
	var wg sync.WaitGroup
	for w := range cfg.clients {
		wg.Go(func() {
			results[w] = work(ctx, cfg, clients[w%len(clients)], w, deadline, &done)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	if err := ctx.Err(); err != nil {
		return result{}, fmt.Errorf("interrupted: %w", err)
	}

	hist := newHist(cfg)
	var errs int64
	var firstErr error
	for _, r := range results {
		hist.Merge(r.hist)
		errs += r.errors
		if firstErr == nil {
			firstErr = r.firstErr
		}
	}
	if errs > 0 {
		fmt.Fprintf(stderr, "etcd-bench: %d calls failed; first error: %v\n", errs, firstErr)
	}
	ms := func(q float64) float64 { return float64(hist.ValueAtQuantile(q)) / 1000 }
	res := result{
		System:    "etcd",
		Workload:  cfg.workload,
		Clients:   cfg.clients,
		Ops:       hist.TotalCount(),
		OpsPerS:   float64(hist.TotalCount()) / elapsed.Seconds(),
		Errors:    errs,
		P50Ms:     ms(50),
		P99Ms:     ms(99),
		P999Ms:    ms(99.9),
		DurationS: elapsed.Seconds(),
	}
	if ws != nil {
		ws.stop()
		res.Watchers, res.WatchEvents = cfg.watchers, ws.events.Load()
		res.WatchP50Ms, res.WatchP99Ms = float64(ws.hist.ValueAtQuantile(50)), float64(ws.hist.ValueAtQuantile(99))
		res.WatchMaxMs = float64(ws.hist.Max())
	}
	return res, nil
}

// watchers are the watches beside the load.
type watchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events atomic.Int64
	mu     sync.Mutex
	hist   *hdrhistogram.Histogram // delays in ms
}

// startWatchers starts cfg.watchers watches of the prefix k/ from now,
// each on one of the clients in turn (nil when none).
func startWatchers(ctx context.Context, cfg config, clients []*clientv3.Client) *watchers {
	if cfg.watchers <= 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	ws := &watchers{cancel: cancel, hist: hdrhistogram.New(0, 3_600_000, 3)}
	for i := range cfg.watchers {
		ch := clients[i%len(clients)].Watch(wctx, "k/", clientv3.WithPrefix())
		ws.wg.Go(func() {
			for resp := range ch {
				now := time.Now()
				for _, ev := range resp.Events {
					ws.events.Add(1)
					if sent, ok := sentAt(ev.Kv.Value); ok {
						ws.mu.Lock()
						_ = ws.hist.RecordValue(max(now.Sub(sent).Milliseconds(), 0))
						ws.mu.Unlock()
					}
				}
			}
		})
	}
	return ws
}

func (ws *watchers) stop() {
	ws.cancel()
	ws.wg.Wait()
}

// stamp writes t's Unix nanoseconds at the start of a value (16 hex
// digits), for a watcher to measure the delay of its event.
func stamp(v []byte, t time.Time) {
	if len(v) >= 16 {
		copy(v, fmt.Sprintf("%016x", t.UnixNano()))
	}
}

func sentAt(v []byte) (time.Time, bool) {
	if len(v) < 16 {
		return time.Time{}, false
	}
	var ns int64
	if _, err := fmt.Sscanf(string(v[:16]), "%016x", &ns); err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func work(ctx context.Context, cfg config, c *clientv3.Client, w int, deadline time.Time, done *atomic.Int64) workerResult {
	r := workerResult{hist: newHist(cfg)}
	// Each call's deadline is a child of this worker's own context, not of
	// the run's, which every worker shares (one lock and one set of
	// children for all the calls in flight).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	val := []byte(value(cfg.valueSize, rand.New(rand.NewPCG(uint64(w), 3))))
	for i := 0; ctx.Err() == nil; i++ {
		t0 := time.Now()
		if !t0.Before(deadline) {
			break
		}
		k := key(w, i%cfg.keys)
		cctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		var err error
		if cfg.workload == "put" {
			if cfg.watchers > 0 {
				stamp(val, t0)
			}
			_, err = c.Put(cctx, k, string(val))
		} else {
			var resp *clientv3.GetResponse
			resp, err = c.Get(cctx, k)
			if err == nil && len(resp.Kvs) != 1 {
				err = fmt.Errorf("get %s: %d values, want 1 (not preloaded?)", k, len(resp.Kvs))
			}
		}
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				break // interrupted: not the cluster's error
			}
			r.errors++
			if r.firstErr == nil {
				r.firstErr = err
			}
			continue
		}
		us := time.Since(t0).Microseconds()
		_ = r.hist.RecordValue(max(us, 1)) // never above the maximum: the call has a deadline of half of it
		done.Add(1)
	}
	return r
}
