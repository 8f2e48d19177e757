package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/pgstore"
)

// schedulerBenchOptions are `shardkit scheduler bench`'s.
type schedulerBenchOptions struct {
	cluster           clusterFlags
	postgres, schema  string
	mode              string
	offers, shards    int
	writers, parallel int
	putBatch          int
	timeout           time.Duration
	brokers, topic    string
	partitions        int
	pollInterval      time.Duration
	batch, relayBatch int
	duePerS           float64
	lead              time.Duration
	cpuprofile        string
}

// The bench's modes.
const (
	benchThroughput = "throughput"
	benchTimers     = "timers"
	benchPipeline   = "pipeline"
)

func newSchedulerBenchCmd() *cobra.Command {
	var o schedulerBenchOptions
	cmd := &cobra.Command{
		Use:   "bench [--peer ADDRS | --postgres DSN]",
		Short: "Measure the scheduler end to end: offers put, stage passes, the saves, their changelog records in Kafka",
		Long: `Measure the scheduler end to end, on the shardkit store of the cluster at
--peer or on the PostgreSQL store with --postgres (the side of
scripts/bench-scheduler.sh that River is measured against). --offers offers
are put from outside; a runner works them, and the changefeed (shardkit) or
the relay (PostgreSQL) sends each save's changelog record to Kafka
(franz-go's in-process broker unless --brokers).

  --mode throughput  each offer needs one pass of a stage that does nothing
                     but save its state: offers per second from the first put
                     to the last record, and each offer's time from its put
                     to its record's arrival
  --mode pipeline    three stages in a row (a patches a field, b follows a's
                     field and patches its own, c follows b's and saves its
                     state): the same figures, to c's record
  --mode timers      each offer gets a timer (ShouldProcess answers At):
                     offer i due at start + --lead + i / --due-per-s; the
                     percentiles are each timer's lateness, from its due time
                     to its Process call

Prints one JSON line, with processed_once: how many offers the last stage
saved exactly once (its state's version is 1), which a run must get equal
to --offers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return benchScheduler(cmd, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster.peers, "peer", defaultPeer, "address (host:port) of a cluster instance, for the shardkit store; a comma-separated list is tried in turn")
	o.cluster.sec.register(f)
	o.cluster.timeout = 30 * time.Second
	f.StringVar(&o.postgres, "postgres", "", "PostgreSQL connection string: the PostgreSQL store instead of the cluster at --peer")
	f.StringVar(&o.schema, "schema", "sched_bench", "the store's schema (dropped and made anew, and dropped at the end), or the shardkit store's prefix (a new one each run: the prefix and a time)")
	f.StringVar(&o.mode, "mode", benchThroughput, "throughput, pipeline or timers")
	f.IntVar(&o.offers, "offers", 20000, "offers to put")
	f.IntVar(&o.shards, "shards", 64, "the store's shards")
	f.IntVar(&o.writers, "writers", 4, "goroutines putting offers")
	f.IntVar(&o.putBatch, "put-batch", 1000, "offers per put: one PutMany (a transaction) each, as River's bench inserts its jobs")
	f.IntVar(&o.parallel, "parallel", 256, "each stage's MaxParallel (River's side runs 200 workers)")
	f.IntVar(&o.batch, "batch", 256, "the runner's BatchSize: marks one store read takes, saves one SaveMany carries")
	f.IntVar(&o.relayBatch, "relay-batch", 1024, "outbox rows one relay round sends")
	f.DurationVar(&o.pollInterval, "poll-interval", 100*time.Millisecond, "the runner's and the relay's PollInterval")
	f.Float64Var(&o.duePerS, "due-per-s", 10000, "--mode timers: timers due per second")
	f.DurationVar(&o.lead, "lead", 5*time.Second, "--mode timers: the first timer is due this long after the first put")
	f.StringVar(&o.brokers, "brokers", "", "Kafka's seed brokers (default: an in-process broker)")
	f.StringVar(&o.topic, "topic", "sched-bench", "the changelog's topic")
	f.IntVar(&o.partitions, "partitions", 8, "the in-process broker's partitions of the topic")
	f.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.StringVar(&o.cpuprofile, "cpuprofile", "", "write the process's CPU profile of the run to this file")
	return cmd
}

// benchResult is the JSON line, in river-bench's shape.
type benchResult struct {
	System   string  `json:"system"`
	Mode     string  `json:"mode"`
	Jobs     int     `json:"jobs"`
	Workers  int     `json:"workers"`
	InsertS  float64 `json:"insert_s"`
	TotalS   float64 `json:"total_s"`
	JobsPerS float64 `json:"jobs_per_s"`
	DuePerS  float64 `json:"due_per_s,omitempty"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	Measured string  `json:"measured"`
	// Records are the last stage's distinct records read from Kafka, and
	// Repeats those read again (the relay sends at least once).
	Records int `json:"records"`
	Repeats int `json:"repeats"`
	// ProcessedOnce counts the offers whose last stage saved once.
	ProcessedOnce int `json:"processed_once"`
}

// noopStage saves a state and nothing else.
type noopStage struct{}

func (noopStage) ShouldProcess(context.Context, scheduler.Offer, scheduler.State) (scheduler.Decision, error) {
	return scheduler.Now(), nil
}

func (noopStage) Process(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
	st, err := anypb.New(wrapperspb.Int64(o.Version))
	return scheduler.Result{State: st}, err
}

// fieldStage is a pipeline's step: it wants an offer that has the field
// after (or any offer, when after is empty) and not yet its own field,
// and patches its own field; with own empty it saves a state instead,
// once.
type fieldStage struct{ after, own string }

func hasField(body []byte, f string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	_, ok := m[f]
	return ok
}

func (s fieldStage) wants(o scheduler.Offer, st scheduler.State) bool {
	switch {
	case s.after != "" && !hasField(o.Body, s.after):
		return false
	case s.own == "":
		return st.Version == 0
	}
	return !hasField(o.Body, s.own)
}

func (s fieldStage) ShouldProcess(_ context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
	if !s.wants(o, st) {
		return scheduler.Skip(), nil
	}
	return scheduler.Now(), nil
}

func (s fieldStage) Process(ctx context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
	switch {
	case !s.wants(o, st):
		return scheduler.Result{}, nil
	case s.own == "":
		return noopStage{}.Process(ctx, o, st)
	}
	return scheduler.Result{Patch: scheduler.Patch{s.own: json.RawMessage("true")}}, nil
}

// timerStage sets a timer at the offer's "due" (Unix microseconds) and
// records how late each timer's first Process call came.
type timerStage struct {
	mu   sync.Mutex
	hist *hdrhistogram.Histogram
	seen map[string]bool
}

func dueOf(body []byte) (time.Time, error) {
	var b struct{ Due int64 }
	if err := json.Unmarshal(body, &b); err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(b.Due), nil
}

func (t *timerStage) ShouldProcess(_ context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Decision, error) {
	if st.Version > 0 {
		return scheduler.Skip(), nil
	}
	due, err := dueOf(o.Body)
	if err != nil {
		return scheduler.Skip(), err
	}
	return scheduler.At(due), nil
}

func (t *timerStage) Process(ctx context.Context, o scheduler.Offer, st scheduler.State) (scheduler.Result, error) {
	due, err := dueOf(o.Body)
	if err != nil {
		return scheduler.Result{}, err
	}
	if late := time.Since(due); late >= -time.Millisecond {
		t.mu.Lock()
		if !t.seen[o.ID] {
			t.seen[o.ID] = true
			_ = t.hist.RecordValue(max(int64(late/time.Microsecond), 1))
		}
		t.mu.Unlock()
	} else {
		// Early (a ShouldProcess error queued it now): wait for the timer.
		return scheduler.Result{Timer: due}, nil
	}
	return noopStage{}.Process(ctx, o, st)
}

// dropSchema drops the benchmark's schema, made anew by each run.
func dropSchema(ctx context.Context, dsn, schema string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

func benchScheduler(cmd *cobra.Command, o *schedulerBenchOptions) error {
	what := "scheduler bench"
	if o.offers < 1 || o.writers < 1 || o.putBatch < 1 || o.parallel < 1 || o.shards < 1 || o.batch < 1 || o.relayBatch < 1 || o.partitions < 1 {
		return usagef("%s: --offers, --writers, --put-batch, --parallel, --shards, --batch, --relay-batch and --partitions must be at least 1", what)
	}
	if o.mode != benchThroughput && o.mode != benchPipeline && o.mode != benchTimers {
		return usagef("%s: --mode %q: use throughput, pipeline or timers", what, o.mode)
	}
	if o.mode == benchTimers && (o.duePerS <= 0 || o.lead < 0) {
		return usagef("%s: --due-per-s must be above 0 and --lead not negative", what)
	}
	stop, err := startCPUProfile(o.cpuprofile, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer stop()
	res, err := runSchedulerBench(cmd.Context(), o, cmd.ErrOrStderr())
	if err != nil {
		return prefixExit(what, err)
	}
	out, err := json.Marshal(res)
	if err != nil {
		return prefixExit(what, err)
	}
	fmt.Fprintln(cmd.OutOrStdout(), string(out))
	return nil
}

func runSchedulerBench(ctx context.Context, o *schedulerBenchOptions, stderr io.Writer) (*benchResult, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var brokers []string
	if o.brokers != "" {
		brokers = splitList([]string{o.brokers})
	} else {
		k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(min(o.partitions, 1<<10)), o.topic)) //nolint:gosec // bounded
		if err != nil {
			return nil, err
		}
		defer k.Close()
		brokers = k.ListenAddrs()
	}
	log := newLogger("warn", "text", stderr)
	bs, err := openBenchStore(ctx, o, brokers, log)
	if err != nil {
		return nil, err
	}
	defer bs.close()
	store := bs.store

	res := &benchResult{System: bs.system, Mode: o.mode, Jobs: o.offers, Workers: o.parallel}
	var stages []scheduler.StageConfig
	last := "noop"
	var timers *timerStage
	switch o.mode {
	case benchThroughput:
		stages = []scheduler.StageConfig{{ID: last, Stage: noopStage{}, MaxParallel: o.parallel}}
		res.Measured = "put to the stage's save's changelog record in Kafka"
	case benchPipeline:
		last = "c"
		stages = []scheduler.StageConfig{
			{ID: "a", Stage: fieldStage{own: "a"}, OwnFields: []string{"a"}, MaxParallel: o.parallel},
			{ID: "b", Stage: fieldStage{after: "a", own: "b"}, Fields: []string{"a"}, OwnFields: []string{"b"}, MaxParallel: o.parallel},
			{ID: last, Stage: fieldStage{after: "b"}, Fields: []string{"b"}, MaxParallel: o.parallel},
		}
		res.Measured = "put to the third stage's save's changelog record in Kafka (three stages in a row)"
	case benchTimers:
		last = "timer"
		timers = &timerStage{hist: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3), seen: make(map[string]bool, o.offers)}
		stages = []scheduler.StageConfig{{ID: last, Stage: timers, MaxParallel: o.parallel}}
		res.Mode, res.DuePerS, res.Measured = benchTimers, o.duePerS, "timer's due time to its Process call (lateness)"
	}

	// The consumer, from the topic's start: it sees each save's record.
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(o.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer kc.Close()
	r, err := scheduler.NewRunner(scheduler.Config{Store: store, Stages: stages, PollInterval: o.pollInterval, BatchSize: o.batch, Logger: log})
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(gctx) })
	g.Go(func() error { return bs.relay(gctx) })

	var mu sync.Mutex
	put := make(map[string]time.Time, o.offers)
	start := time.Now()
	first := start.Add(o.lead)
	pg, pctx := errgroup.WithContext(ctx)
	batches := make(chan int)
	pg.Go(func() error {
		defer close(batches)
		for i := 0; i < o.offers; i += o.putBatch {
			select {
			case batches <- i:
			case <-pctx.Done():
				return nil
			}
		}
		return nil
	})
	for range o.writers {
		pg.Go(func() error {
			for from := range batches {
				offers := make([]scheduler.PutOffer, 0, o.putBatch)
				for i := from; i < min(from+o.putBatch, o.offers); i++ {
					body := `{"n":` + strconv.Itoa(i) + `}`
					if timers != nil {
						due := first.Add(time.Duration(float64(i) / o.duePerS * float64(time.Second)))
						body = `{"n":` + strconv.Itoa(i) + `,"due":` + strconv.FormatInt(due.UnixMicro(), 10) + `}`
					}
					offers = append(offers, scheduler.PutOffer{ID: "o" + strconv.Itoa(i), Body: []byte(body)})
				}
				now := time.Now()
				mu.Lock()
				for _, p := range offers {
					put[p.ID] = now
				}
				mu.Unlock()
				errs, err := bs.putMany(pctx, offers)
				if err != nil {
					return fmt.Errorf("put offers %d to %d: %w", from, from+len(offers)-1, err)
				}
				for i, err := range errs {
					if err != nil {
						return fmt.Errorf("put %s: %w", offers[i].ID, err)
					}
				}
			}
			return nil
		})
	}
	if err := pg.Wait(); err != nil {
		return nil, err
	}
	res.InsertS = time.Since(start).Seconds()
	hist := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	seen := make(map[string]bool, o.offers)
	for len(seen) < o.offers {
		fs := kc.PollFetches(gctx)
		if gctx.Err() != nil {
			if err := g.Wait(); err != nil && ctx.Err() == nil {
				return nil, err // the runner or the relay failed
			}
			return nil, fmt.Errorf("%d of %d offers' saves by stage %q reached Kafka in %v; %s", len(seen), o.offers, last, o.timeout,
				missingOffers(store, o, seen, last))
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return nil, errs[0].Err
		}
		now := time.Now()
		for it := fs.RecordIter(); !it.Done(); {
			var rec scheduler.Record
			if err := json.Unmarshal(it.Next().Value, &rec); err != nil || rec.Stage != last {
				continue // an outside put's record, or an earlier stage's
			}
			if seen[rec.OfferID] {
				res.Repeats++
				continue
			}
			seen[rec.OfferID] = true
			mu.Lock()
			at := put[rec.OfferID]
			mu.Unlock()
			_ = hist.RecordValue(max(int64(now.Sub(at)/time.Microsecond), 1))
		}
	}
	res.TotalS = time.Since(start).Seconds()
	cancel()
	_ = g.Wait()
	res.Records = len(seen)
	res.JobsPerS = float64(o.offers) / res.TotalS
	if timers != nil {
		hist = timers.hist
		res.JobsPerS = float64(o.offers) / (res.TotalS - o.lead.Seconds())
	}
	res.P50Ms, res.P99Ms = float64(hist.ValueAtQuantile(50))/1000, float64(hist.ValueAtQuantile(99))/1000
	res.MaxMs = float64(hist.Max()) / 1000
	// Saved once: the last stage's state is at version 1.
	if res.ProcessedOnce, err = bs.savedOnce(context.Background(), last); err != nil {
		return nil, fmt.Errorf("count the offers saved once: %w", err)
	}
	return res, nil
}

// missingOffers says what the store holds of (up to five of) the offers
// whose last stage's record never reached Kafka: whether the stage saved
// it (its state's version) and which queue entries it has, which tells a
// trigger lost in the scheduler from a record lost on its way to Kafka.
func missingOffers(store scheduler.Store, o *schedulerBenchOptions, seen map[string]bool, last string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	for i := 0; i < o.offers && len(out) < 5; i++ {
		id := "o" + strconv.Itoa(i)
		if seen[id] {
			continue
		}
		off, state, err := store.Load(ctx, id, last)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: load: %v", id, err))
			continue
		}
		entries, err := store.Check(ctx, scheduler.ShardOf(id, o.shards), id)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: check: %v", id, err))
			continue
		}
		var es []string
		for _, e := range entries {
			es = append(es, fmt.Sprintf("%s lane %d due %s attempts %d %q", e.Stage, e.Lane, e.Due.UTC().Format(time.RFC3339Nano), e.Attempts, e.LastError))
		}
		out = append(out, fmt.Sprintf("%s: offer version %d, stage %q state version %d, entries [%s]", id, off.Version, last, state.Version, strings.Join(es, "; ")))
	}
	return "missing: " + strings.Join(out, ", ")
}

// benchStore is the store the bench runs on, with what differs between
// the two: how the changelog reaches Kafka, how offers are put in bulk,
// how the offers saved once are counted.
type benchStore struct {
	system    string
	store     scheduler.Store
	relay     func(context.Context) error
	putMany   func(context.Context, []scheduler.PutOffer) ([]error, error)
	savedOnce func(ctx context.Context, stage string) (int, error)
	close     func()
}

func openBenchStore(ctx context.Context, o *schedulerBenchOptions, brokers []string, log *slog.Logger) (*benchStore, error) {
	if o.postgres != "" {
		if err := dropSchema(ctx, o.postgres, o.schema); err != nil {
			return nil, err
		}
		store, err := pgstore.Open(ctx, o.postgres, pgstore.Options{Schema: o.schema, Shards: o.shards})
		if err != nil {
			return nil, err
		}
		relay, err := pgstore.NewRelay(store, pgstore.RelayConfig{Brokers: brokers, Topic: o.topic, Batch: o.relayBatch, PollInterval: o.pollInterval, Logger: log})
		if err != nil {
			store.Close()
			return nil, err
		}
		return &benchStore{
			system: "scheduler-pg", store: store, relay: relay.Run,
			putMany: func(ctx context.Context, offers []scheduler.PutOffer) ([]error, error) {
				_, errs, err := store.PutMany(ctx, offers)
				return errs, err
			},
			savedOnce: func(ctx context.Context, stage string) (int, error) {
				n := 0
				err := store.Pool().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{o.schema, "states"}.Sanitize()+
					" WHERE stage_id = $1 AND version = 1", stage).Scan(&n)
				return n, err
			},
			close: func() {
				relay.Close()
				store.Close()
				_ = dropSchema(context.Background(), o.postgres, o.schema)
			},
		}, nil
	}
	c, err := o.cluster.client(ctx)
	if err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("%.24s%d", o.schema, time.Now().Unix()%1_000_000) // at most 30 of the 32 bytes a prefix has
	store, err := clusterstore.Open(ctx, c, clusterstore.Options{Prefix: prefix, Shards: o.shards})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	cfg := store.Changelog()
	cfg.Brokers, cfg.Topic, cfg.Logger, cfg.SaveEvery = brokers, o.topic, log, o.pollInterval
	return &benchStore{
		system: "scheduler-shardkit", store: store,
		relay: func(ctx context.Context) error { return changefeed.Run(ctx, cfg) },
		putMany: func(ctx context.Context, offers []scheduler.PutOffer) ([]error, error) {
			_, errs, err := store.PutMany(ctx, offers)
			return errs, err
		},
		savedOnce: func(ctx context.Context, stage string) (int, error) {
			n := 0
			for sh := range o.shards {
				after := ""
				for {
					ids, err := store.Scan(ctx, sh, after, 1000)
					if err != nil {
						return n, err
					}
					for _, id := range ids {
						_, st, err := store.Load(ctx, id, stage)
						if err != nil {
							return n, err
						}
						if st.Version == 1 {
							n++
						}
					}
					if len(ids) < 1000 {
						break
					}
					after = ids[len(ids)-1]
				}
			}
			return n, nil
		},
		close: func() { _ = c.Close() },
	}, nil
}
