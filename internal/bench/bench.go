// Package bench is the load generator behind `shardkit bench`: N
// concurrent clients call one operation of the public client (Insert,
// Replace, a linearizable Select, or a mix) on the rows of one space, for a
// number of operations or a duration, and it reports ops/s, errors and the
// latency percentiles of the successful calls.
//
// The load has the shape of bench/etcd (etcd-bench), so that the two can be
// compared side by side (scripts/bench-vs-etcd.sh, docs/benchmarks.md):
// the clients share a few connections (one client.Client per connection,
// client w using connection w mod Conns), each call has its own deadline,
// and no call starts after the duration; calls in flight then finish.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/retry"
	"github.com/shardkit/shardkit/tuple"
)

// The workloads.
const (
	// Insert walks the keys 0..Keys-1 once, in order, shared by the
	// clients (each takes the next key): Keys distinct rows, no duplicates
	// unless the rows exist already.
	Insert = "insert"
	// Replace writes keys drawn uniformly from 0..Keys-1.
	Replace = "replace"
	// Get reads keys drawn uniformly from 0..Keys-1 with a linearizable
	// (rw) Select; the rows are written first (Preload), untimed.
	Get = "get"
	// Mixed draws, for each operation, a Get (50%) or a Replace (50%) of
	// a key drawn uniformly from 0..Keys-1; preloaded like Get.
	Mixed = "mixed"
	// Scan reads the whole space with Space.Scan (linearizable pages of
	// PageSize rows), each client from the start again when it ends; an
	// operation is a row read, a latency a page's; preloaded like Get.
	Scan = "scan"
	// Range reads PageSize rows of a bucket drawn uniformly (from its
	// first key, linearizably) with Space.Range: an operation is a call,
	// Result.Reads counts the rows; preloaded like Get.
	Range = "range"
)

// Workloads lists the workloads, for help texts and checks.
var Workloads = []string{Insert, Replace, Get, Mixed, Scan, Range}

// DefaultSpace is the space the bench makes when none is named.
const DefaultSpace = "bench"

// SpaceDef returns the bench's space definition: key unsigned (the primary
// key), value bytes.
func SpaceDef(name string) client.SpaceDef {
	return client.SpaceDef{
		Name:       name,
		Format:     tuple.Format{{Name: "key", Type: tuple.TypeUnsigned}, {Name: "value", Type: tuple.TypeBytes}},
		PrimaryKey: []string{"key"},
	}
}

// Config is one bench run.
type Config struct {
	// Peers are the instances the clients start from (host:port).
	Peers []string
	// ClientConfig, when set, adjusts each client's configuration
	// (credentials, dial options) after Peers and Timeout are set.
	ClientConfig func(*client.Config)
	// Space is the space to load (DefaultSpace when empty). It is made
	// with SpaceDef when missing; an existing one must have the bench's
	// definition.
	Space    string
	Workload string
	// Keys is the key range: 0..Keys-1.
	Keys int
	// Count is how many operations to run in all (successful or not);
	// 0: run for Duration.
	Count int64
	// Duration is how long the timed part runs when Count is 0.
	Duration time.Duration
	// Clients is how many calls are in flight at once.
	Clients int
	// Rate, when positive, paces the calls: Rate operations a second in
	// all, each client starting one every Clients/Rate seconds on a fixed
	// schedule (the clients' schedules staggered), and a call's latency
	// counted from when the schedule had it start, not from when it did,
	// so that a call delayed by the one before it counts its wait (no
	// coordinated omission, as wrk2 measures). A cluster slower than the
	// rate falls behind and the latencies show it. 0: each client starts
	// its next call as soon as the last ends (a closed loop, as fast as
	// the cluster answers).
	Rate float64
	// Conns is how many client.Client (each its own connections) the
	// clients share; at most Clients.
	Conns     int
	ValueSize int
	// Timeout bounds each call (its whole, retries included).
	Timeout time.Duration
	// Preload (get, mixed): write every key of the range before the timed
	// part. Without it a read of a missing row counts as an error.
	Preload bool
	// Settle is the pause between the preload and the timed part.
	Settle time.Duration
	// PageSize (scan) is how many rows one page reads (0: 1000).
	PageSize int
	// NoPipelining turns the clients' pipelining off
	// (client.Config.DisablePipelining): each call its own RPC.
	NoPipelining bool
	// PipelineDepth is client.Config.PipelineDepth (0: its default).
	PipelineDepth int
	// PipelineWrites is client.Config.PipelineWrites: writes into the
	// pipeline too.
	PipelineWrites bool
	// NoStream is client.Config.DisableStream: writes and point reads as
	// the pipeline sends them without a data stream.
	NoStream bool
	// Watchers is how many watches of the space (client.Watch, every
	// bucket, from the timed part's start) run beside the load; each
	// event's delay from its batch's leader-stamped time to its arrival
	// is recorded (Result.WatchP99Ms).
	Watchers int
	// Progress, when not nil, gets a line every ProgressEvery (default 1 s)
	// while the timed part runs; Log gets the preload's and the first
	// error's lines (discarded when nil).
	Progress      io.Writer
	ProgressEvery time.Duration
	Log           io.Writer
}

// Defaults of the CLI's flags.
const (
	DefaultKeys      = 100_000
	DefaultClients   = 1
	DefaultConns     = 16
	DefaultValueSize = 100
	DefaultTimeout   = 5 * time.Second
	DefaultDuration  = 10 * time.Second
	DefaultSettle    = 2 * time.Second
	// preloadBatchRows is the most rows one preload write carries (all of one
	// bucket: a batch writes one bucket).
	preloadBatchRows = 128
)

// Check refuses a configuration that cannot run.
func (c Config) Check() error {
	switch {
	case len(c.Peers) == 0:
		return errors.New("no peer: give at least one instance's host:port")
	case !slices.Contains(Workloads, c.Workload):
		return fmt.Errorf("workload %q: want one of %v", c.Workload, Workloads)
	case c.Keys < 1:
		return fmt.Errorf("keys %d: want at least 1", c.Keys)
	case c.Count < 0:
		return fmt.Errorf("count %d: want 0 (run for a duration) or more", c.Count)
	case c.Count == 0 && c.Duration <= 0:
		return errors.New("give a count of operations or a positive duration")
	case c.Workload == Insert && c.Count > int64(c.Keys):
		return fmt.Errorf("insert of %d rows into a key range of %d: each key is inserted once; raise the keys to at least the count", c.Count, c.Keys)
	case c.Clients < 1:
		return fmt.Errorf("clients %d: want at least 1", c.Clients)
	case c.Conns < 1:
		return fmt.Errorf("conns %d: want at least 1", c.Conns)
	case c.ValueSize < 0:
		return fmt.Errorf("value size %d: want 0 or more", c.ValueSize)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout %v: want a positive duration", c.Timeout)
	case c.Settle < 0:
		return fmt.Errorf("settle %v: want 0 or more", c.Settle)
	case c.Watchers < 0:
		return fmt.Errorf("watchers %d: want 0 or more", c.Watchers)
	case c.PageSize < 0 || c.PageSize > 10000:
		return fmt.Errorf("page size %d: want 1 to 10000 (0: 1000)", c.PageSize)
	case c.Workload == Scan && c.Rate != 0:
		return errors.New("a scan is not paced: give no rate")
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate %v: want 0 (no pacing) or a positive number of operations a second", c.Rate)
	case c.Rate > 0 && c.interval() < time.Microsecond:
		return fmt.Errorf("rate %v with %d clients: each client would start a call every %v; give at most %d operations a second per client",
			c.Rate, c.Clients, c.interval(), int(time.Second/time.Microsecond))
	}
	return nil
}

// interval is how far apart one client's paced calls are (Rate positive).
func (c Config) interval() time.Duration {
	return time.Duration(float64(c.Clients) / c.Rate * float64(time.Second))
}

// Result is what a run measured. Its JSON is `shardkit bench --format
// json`'s (the keys of etcd-bench's, plus the run's shape).
type Result struct {
	System   string `json:"system"`
	Workload string `json:"workload"`
	Space    string `json:"space"`
	Clients  int    `json:"clients"`
	Conns    int    `json:"conns"`
	// Rate is the paced rate asked for (Config.Rate; 0: a closed loop).
	Rate float64 `json:"rate"`
	// Pipelining: the clients coalesced concurrent calls into Multi calls.
	Pipelining bool `json:"pipelining"`
	// PipelineDepth is the pipeline's slots per instance, per client
	// (0 when pipelining is off).
	PipelineDepth int `json:"pipeline_depth"`
	// PipelineWrites: writes went through the pipeline too.
	PipelineWrites bool `json:"pipeline_writes"`
	// Stream: the clients sent writes and point reads on one data stream
	// per instance.
	Stream bool `json:"stream"`
	// PageSize is a scan's rows per page (0 for the other workloads).
	PageSize  int     `json:"page_size"`
	Keys      int     `json:"keys"`
	ValueSize int     `json:"value_size"`
	Ops       int64   `json:"ops"`
	OpsPerS   float64 `json:"ops_per_s"`
	Errors    int64   `json:"errors"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	MaxMs     float64 `json:"max_ms"`
	DurationS float64 `json:"duration_s"`
	// Reads and Writes split Ops by kind (mixed shows both).
	Reads  int64 `json:"reads"`
	Writes int64 `json:"writes"`
	// PreloadRows and PreloadS: the untimed preload (get, mixed).
	PreloadRows int64   `json:"preload_rows"`
	PreloadS    float64 `json:"preload_s"`
	// FirstError is the first failed call's error ("" when none failed).
	FirstError string `json:"first_error"`
	// Watchers ran beside the load (Config.Watchers); WatchEvents is the
	// events they received in all, WatchP50Ms, WatchP99Ms and WatchMaxMs
	// the delay from an event's batch (its leader-stamped time) to its
	// arrival, in whole milliseconds.
	Watchers    int     `json:"watchers"`
	WatchEvents int64   `json:"watch_events"`
	WatchP50Ms  float64 `json:"watch_p50_ms"`
	WatchP99Ms  float64 `json:"watch_p99_ms"`
	WatchMaxMs  float64 `json:"watch_max_ms"`
}

// newHist records latencies in microseconds, from 1 µs to 60 s or twice
// the call deadline, 3 significant digits.
func newHist(timeout time.Duration) *hdrhistogram.Histogram {
	return hdrhistogram.New(1, max(60_000_000, 2*timeout.Microseconds()), 3)
}

// Run runs one bench: it connects, makes or checks the space, preloads
// (get, mixed), then runs the timed part and returns what it measured. An
// error means the run could not be made (no cluster, a bad space); failed
// calls of the timed part are counted in Result.Errors instead.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Space == "" {
		cfg.Space = DefaultSpace
	}
	if err := cfg.Check(); err != nil {
		return Result{}, err
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	conns := min(cfg.Conns, cfg.Clients)
	clients := make([]*client.Client, 0, conns)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for range conns {
		ccfg := client.Config{Peers: cfg.Peers, Timeout: cfg.Timeout, DisablePipelining: cfg.NoPipelining, PipelineDepth: cfg.PipelineDepth,
			PipelineWrites: cfg.PipelineWrites, DisableStream: cfg.NoStream}
		if cfg.ClientConfig != nil {
			cfg.ClientConfig(&ccfg)
		}
		c, err := client.New(ctx, ccfg)
		if err != nil {
			return Result{}, err
		}
		clients = append(clients, c)
	}
	if err := ensureSpace(ctx, clients[0], cfg); err != nil {
		return Result{}, err
	}
	// Every client learns the routing table and connects to the leader
	// before the clock starts.
	if err := warmUp(ctx, clients, cfg); err != nil {
		return Result{}, err
	}

	res := Result{System: "shardkit", Workload: cfg.Workload, Space: cfg.Space, Clients: cfg.Clients, Conns: conns, Rate: cfg.Rate,
		Pipelining: !cfg.NoPipelining, PipelineDepth: pipelineDepth(cfg), PipelineWrites: !cfg.NoPipelining && cfg.PipelineWrites,
		Stream: !cfg.NoPipelining && !cfg.NoStream,
		Keys:   cfg.Keys, ValueSize: cfg.ValueSize}
	if cfg.Workload == Scan || cfg.Workload == Range {
		res.PageSize = cmp.Or(cfg.PageSize, 1000)
	}
	if cfg.Preload && (cfg.Workload == Get || cfg.Workload == Mixed || cfg.Workload == Scan || cfg.Workload == Range) {
		start := time.Now()
		n, err := preload(ctx, clients, cfg)
		if err != nil {
			return Result{}, err
		}
		res.PreloadRows, res.PreloadS = n, time.Since(start).Seconds()
		fmt.Fprintf(logw, "bench: preloaded %d rows of space %s in %.1fs; settling %v\n", n, cfg.Space, res.PreloadS, cfg.Settle)
		if err := retry.Sleep(ctx, cfg.Settle); err != nil {
			return Result{}, err
		}
	}

	ws, err := startWatchers(ctx, clients, cfg)
	if err != nil {
		return Result{}, err
	}
	t := timed(ctx, clients, cfg)
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("interrupted: %w", err)
	}
	if ws != nil {
		ws.stop()
		res.Watchers, res.WatchEvents = cfg.Watchers, ws.events.Load()
		res.WatchP50Ms = float64(ws.hist.ValueAtQuantile(50))
		res.WatchP99Ms = float64(ws.hist.ValueAtQuantile(99))
		res.WatchMaxMs = float64(ws.hist.Max())
	}
	ms := func(q float64) float64 { return float64(t.hist.ValueAtQuantile(q)) / 1000 }
	res.Ops = t.hist.TotalCount()
	if cfg.Workload == Scan {
		res.Ops = t.reads // rows; the histogram holds pages
	}
	res.Errors = t.errors
	res.Reads, res.Writes = t.reads, t.writes
	res.DurationS = t.elapsed.Seconds()
	if res.DurationS > 0 {
		res.OpsPerS = float64(res.Ops) / res.DurationS
	}
	res.P50Ms, res.P99Ms, res.P999Ms = ms(50), ms(99), ms(99.9)
	res.MaxMs = float64(t.hist.Max()) / 1000
	if t.firstErr != nil {
		res.FirstError = t.firstErr.Error()
		fmt.Fprintf(logw, "bench: %d calls failed; first error: %v\n", t.errors, t.firstErr)
	}
	return res, nil
}

// watchers are the watches running beside a load.
type watchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events atomic.Int64
	mu     sync.Mutex
	hist   *hdrhistogram.Histogram // delays in ms
}

// startWatchers starts cfg.Watchers watches of the space, each on one of
// the clients in turn (nil when none).
func startWatchers(ctx context.Context, clients []*client.Client, cfg Config) (*watchers, error) {
	if cfg.Watchers <= 0 {
		return nil, nil
	}
	wctx, cancel := context.WithCancel(ctx)
	ws := &watchers{cancel: cancel, hist: hdrhistogram.New(0, 3_600_000, 3)}
	for i := range cfg.Watchers {
		w, err := clients[i%len(clients)].Watch(wctx, client.WatchOptions{Spaces: []string{cfg.Space}})
		if err != nil {
			ws.stop()
			return nil, fmt.Errorf("watcher %d: %w", i+1, err)
		}
		ws.wg.Go(func() {
			defer w.Close()
			for ev, err := range w.Events() {
				if err != nil {
					return
				}
				d := max(time.Since(ev.Time).Milliseconds(), 0)
				ws.events.Add(1)
				ws.mu.Lock()
				_ = ws.hist.RecordValue(d)
				ws.mu.Unlock()
			}
		})
	}
	return ws, nil
}

func (ws *watchers) stop() {
	ws.cancel()
	ws.wg.Wait()
}

// ensureSpace makes the space with the bench's definition, or checks that
// the existing one has it.
func ensureSpace(ctx context.Context, c *client.Client, cfg Config) error {
	want := SpaceDef(cfg.Space)
	var got client.SpaceDef
	var err error
	// A cluster just started may have no group-0 leader yet: retry what
	// is safe to retry for up to 60 s.
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, max(cfg.Timeout, 30*time.Second))
		got, err = c.CreateSpace(cctx, want, true)
		cancel()
		if err == nil || !client.IsRetryable(err) || ctx.Err() != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil {
		if !sameDef(got, want) {
			return fmt.Errorf("space %s exists with another definition (%s); the bench needs %s: name another space with --space",
				cfg.Space, describe(got), describe(want))
		}
		return nil
	}
	if errors.Is(err, client.ErrAlreadyExists) {
		return fmt.Errorf("space %s exists with another definition; the bench needs %s: name another space with --space (%w)",
			cfg.Space, describe(want), err)
	}
	return fmt.Errorf("space %s: %w", cfg.Space, err)
}

func sameDef(a, b client.SpaceDef) bool {
	return slices.Equal(a.Format, b.Format) && slices.Equal(a.PrimaryKey, b.PrimaryKey) &&
		slices.Equal(a.ShardingFields(), b.ShardingFields())
}

func describe(d client.SpaceDef) string {
	s := "fields"
	for i, f := range d.Format {
		sep := ","
		if i == 0 {
			sep = ""
		}
		s += fmt.Sprintf("%s %s:%s", sep, f.Name, f.Type)
	}
	return fmt.Sprintf("%s, primary key %v", s, d.PrimaryKey)
}

// warmUp makes each client read key 0 once (linearizably: at the leader),
// so that it has the routing table and a connection to the leader before
// the timed part. A cluster whose buckets are not placed yet answers
// "unavailable"; this waits up to 60 s (or the context) for it.
func warmUp(ctx context.Context, clients []*client.Client, cfg Config) error {
	key := []tuple.Value{tuple.Uint(0)}
	deadline := time.Now().Add(60 * time.Second)
	for i, c := range clients {
		sp := c.Space(cfg.Space)
		for {
			cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			_, _, err := sp.Select(cctx, key, client.RW)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !client.IsRetryable(err) || time.Now().After(deadline) {
				return fmt.Errorf("connection %d: a first read of space %s: %w", i+1, cfg.Space, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// value returns the value bytes of one client: size random letters.
func value(size int, rng *rand.Rand) []byte {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, size)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return b
}

func row(key uint64, val []byte) tuple.Tuple {
	return tuple.Tuple{tuple.Uint(key), tuple.Bytes(val)}
}

// preload writes every key of the range, untimed: the keys grouped by
// bucket (client-side, from the routing table), up to preloadBatchRows rows of
// one bucket per write, Clients writers spread over the connections. Each
// write is tried up to 3 times with a deadline of at least 30 s: the
// preload is not measured, and a busy machine should not fail it (a
// replace is idempotent).
func preload(ctx context.Context, clients []*client.Client, cfg Config) (int64, error) {
	sp := clients[0].Space(cfg.Space)
	byBucket := map[uint32][]uint64{}
	var order []uint32
	for k := range uint64(cfg.Keys) {
		b, err := sp.Bucket(ctx, tuple.Uint(k))
		if err != nil {
			return 0, fmt.Errorf("preload: the bucket of key %d: %w", k, err)
		}
		if _, ok := byBucket[b]; !ok {
			order = append(order, b)
		}
		byBucket[b] = append(byBucket[b], k)
	}
	batches := make(chan []uint64)
	writers := min(cfg.Clients, 4*len(clients), 256)
	var (
		wg      sync.WaitGroup
		written atomic.Int64
		errOnce sync.Once
		failed  error
	)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	val := value(cfg.ValueSize, rand.New(rand.NewPCG(1, 2)))
	for w := range writers {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for keys := range batches {
				if err := preloadBatch(pctx, c, cfg, keys, val); err != nil {
					errOnce.Do(func() { failed = err; cancel() })
					continue // drain so that the producer ends
				}
				written.Add(int64(len(keys)))
			}
		})
	}
	for _, b := range order {
		keys := byBucket[b]
		for len(keys) > 0 {
			n := min(len(keys), preloadBatchRows)
			batches <- keys[:n]
			keys = keys[n:]
		}
	}
	close(batches)
	wg.Wait()
	if failed != nil {
		return written.Load(), fmt.Errorf("preload: %w", failed)
	}
	return written.Load(), ctx.Err()
}

func preloadBatch(ctx context.Context, c *client.Client, cfg Config, keys []uint64, val []byte) error {
	var err error
	for attempt := range 3 {
		if err := retry.Sleep(ctx, time.Duration(attempt)*time.Second); err != nil {
			return err
		}
		b := c.Batch()
		for _, k := range keys {
			b.Replace(cfg.Space, row(k, val))
		}
		cctx, cancel := context.WithTimeout(ctx, max(cfg.Timeout, 30*time.Second))
		_, err = b.Do(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// timedResult is what the timed part measured.
type timedResult struct {
	hist          *hdrhistogram.Histogram
	errors        int64
	reads, writes int64
	firstErr      error
	elapsed       time.Duration
}

// worker is what one client measured.
type worker struct {
	hist          *hdrhistogram.Histogram
	errors        int64
	reads, writes int64
	firstErr      error
}

// timed runs the clients and merges what they measured.
func timed(ctx context.Context, clients []*client.Client, cfg Config) timedResult {
	var (
		issued atomic.Int64 // operations started (count mode, insert's next key)
		done   atomic.Int64 // successful calls, for the progress line
		failed atomic.Int64
	)
	workers := make([]worker, cfg.Clients)
	stopProgress := progress(cfg, &done, &failed)
	start := time.Now()
	var deadline time.Time
	if cfg.Count == 0 {
		deadline = start.Add(cfg.Duration)
	}
	var wg sync.WaitGroup
	for w := range cfg.Clients {
		wg.Go(func() {
			if cfg.Workload == Scan {
				workers[w] = scanWork(ctx, cfg, clients[w%len(clients)], deadline, &issued, &done, &failed)
				return
			}
			workers[w] = work(ctx, cfg, clients[w%len(clients)], w, newPacer(cfg, w, start), deadline, &issued, &done, &failed)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()

	out := timedResult{hist: newHist(cfg.Timeout), elapsed: elapsed}
	for _, r := range workers {
		out.hist.Merge(r.hist)
		out.errors += r.errors
		out.reads += r.reads
		out.writes += r.writes
		if out.firstErr == nil {
			out.firstErr = r.firstErr
		}
	}
	return out
}

// pacer is one client's schedule under Config.Rate: the n-th call is due
// at first + n*every. A nil pacer: no schedule (a closed loop).
type pacer struct {
	first time.Time
	every time.Duration
	n     int64
}

// newPacer returns client w's schedule, its first call offset by its
// share of one interval (the clients spread over it), or nil without a
// rate.
func newPacer(cfg Config, w int, start time.Time) *pacer {
	if cfg.Rate <= 0 {
		return nil
	}
	every := cfg.interval()
	first := start.Add(every * time.Duration(w) / time.Duration(cfg.Clients))
	return &pacer{first: first, every: every}
}

// due returns when the next call is due, and moves the schedule on.
func (p *pacer) due() time.Time {
	t := p.first.Add(time.Duration(p.n) * p.every)
	p.n++
	return t
}

// work is one client's loop: it takes the next operation while the count
// or the duration allows (at its time on the schedule, when paced), and
// records each successful call's latency (from that time, when paced).
func work(ctx context.Context, cfg Config, c *client.Client, w int, pace *pacer, deadline time.Time,
	issued, done, failed *atomic.Int64,
) worker {
	r := worker{hist: newHist(cfg.Timeout)}
	// Each call's deadline is a child of this worker's own context, not of
	// the run's, which every worker shares (one lock and one set of
	// children for all the calls in flight).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(w), 3))
	val := value(cfg.ValueSize, rng)
	sp := c.Space(cfg.Space)
	keys := uint64(cfg.Keys)
	buckets := uint32(1)
	if cfg.Workload == Range {
		buckets = bucketCount(ctx, c)
	}
	for ctx.Err() == nil {
		t0 := time.Now()
		if !deadline.IsZero() && !t0.Before(deadline) {
			break
		}
		if pace != nil {
			// Due at t0: past the deadline it is not made; late (the
			// call before ran long), it starts at once and counts its
			// wait.
			if t0 = pace.due(); (!deadline.IsZero() && !t0.Before(deadline)) || retry.Sleep(ctx, time.Until(t0)) != nil {
				break
			}
		}
		var k uint64
		if cfg.Count > 0 || cfg.Workload == Insert {
			n := issued.Add(1) - 1
			if (cfg.Count > 0 && n >= cfg.Count) || (cfg.Workload == Insert && n >= int64(cfg.Keys)) {
				break
			}
			k = uint64(n)
		}
		if cfg.Workload != Insert {
			k = rng.Uint64N(keys)
		}
		read := cfg.Workload == Get || (cfg.Workload == Mixed && rng.IntN(2) == 0)
		cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		var err error
		rows := int64(1) // rows read (a range's), or one
		switch {
		case cfg.Workload == Range:
			var ts []client.Versioned
			ts, _, err = sp.Range(cctx, client.RangeOptions{Bucket: 1 + uint32(rng.Uint64N(uint64(buckets))), Limit: cmp.Or(cfg.PageSize, 1000)})
			rows = int64(len(ts))
		case read:
			var got client.Result
			got, _, err = sp.Select(cctx, []tuple.Value{tuple.Uint(k)}, client.RW)
			if err == nil && !got.Found {
				err = fmt.Errorf("select key %d from %s: no row (not preloaded?)", k, cfg.Space)
			}
		case cfg.Workload == Insert:
			_, err = sp.Insert(cctx, row(k, val))
		default:
			_, err = sp.Replace(cctx, row(k, val))
		}
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				break // interrupted: not the cluster's error
			}
			r.errors++
			failed.Add(1)
			if r.firstErr == nil {
				r.firstErr = err
			}
			continue
		}
		us := time.Since(t0).Microseconds()
		_ = r.hist.RecordValue(max(us, 1)) // never above the maximum: the call has a deadline of half of it
		if read || cfg.Workload == Range {
			r.reads += rows
		} else {
			r.writes++
		}
		done.Add(1)
	}
	return r
}

// progress writes a line to cfg.Progress every cfg.ProgressEvery while the
// timed part runs; it returns the function that stops it.
func progress(cfg Config, done, failed *atomic.Int64) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	every := cfg.ProgressEvery
	if every <= 0 {
		every = time.Second
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		var last int64
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				n := done.Load()
				fmt.Fprintf(cfg.Progress, "bench: %s %d clients: %4.0fs  %d ops  %.0f/s  %d errors\n",
					cfg.Workload, cfg.Clients, time.Since(start).Seconds(), n, float64(n-last)/every.Seconds(), failed.Load())
				last = n
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

func pipelineDepth(cfg Config) int {
	switch {
	case cfg.NoPipelining:
		return 0
	case cfg.PipelineDepth > 0:
		return cfg.PipelineDepth
	}
	return client.DefaultPipelineDepth
}
