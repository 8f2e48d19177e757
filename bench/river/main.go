// Command river-bench is the job-queue peer of the scheduler's benchmark
// (docs/benchmarks.md, "Scheduler against River"): it runs River
// (github.com/riverqueue/river) on a PostgreSQL database, inserts jobs
// whose work does nothing, and measures how fast they are inserted,
// worked and completed, end to end, and how late scheduled ones start.
// It is a module of its own so that River's dependencies stay out of
// shardkit's.
//
//	river-bench --dsn postgres://... --jobs 100000 --workers 100
//	river-bench --dsn postgres://... --jobs 100000 --due-per-s 10000
//
// Without --due-per-s every job is available at once: the run measures
// throughput, from the first insert to the last completion, and each
// job's time from its insert to its completion (both by the database's
// clock). With --due-per-s R, job i is scheduled at start + --lead +
// i/R: the run measures lateness, how long after its scheduled time each
// job was first attempted (River makes scheduled jobs available by a
// maintenance pass every 5 s, not configurable outside its tests). It
// prints one JSON line.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// NoopArgs is the benchmark's job: no arguments, no work.
type NoopArgs struct{}

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "noop" }

// NoopWorker does nothing.
type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

// Work implements river.Worker.
func (NoopWorker) Work(context.Context, *river.Job[NoopArgs]) error { return nil }

type config struct {
	dsn         string
	schema      string
	jobs        int
	workers     int
	insertBatch int
	duePerS     float64
	lead        time.Duration
	cooldown    time.Duration
	poll        time.Duration
	timeout     time.Duration
}

// result is the run's JSON line.
type result struct {
	System   string  `json:"system"`
	Mode     string  `json:"mode"` // throughput or timers
	Jobs     int     `json:"jobs"`
	Workers  int     `json:"workers"`
	InsertS  float64 `json:"insert_s"`
	TotalS   float64 `json:"total_s"`
	JobsPerS float64 `json:"jobs_per_s"`
	DuePerS  float64 `json:"due_per_s,omitempty"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	Measured string  `json:"measured"` // what the percentiles are of
}

func main() {
	var c config
	flag.StringVar(&c.dsn, "dsn", os.Getenv("SHARDKIT_TEST_POSTGRES_DSN"), "PostgreSQL connection string (default $SHARDKIT_TEST_POSTGRES_DSN)")
	flag.StringVar(&c.schema, "schema", "river_bench", "schema for River's tables, created and migrated if missing; its jobs are deleted before the run")
	flag.IntVar(&c.jobs, "jobs", 100_000, "jobs to insert and work")
	flag.IntVar(&c.workers, "workers", 100, "River's MaxWorkers of the queue")
	flag.IntVar(&c.insertBatch, "insert-batch", 1000, "jobs per InsertManyFast call")
	flag.Float64Var(&c.duePerS, "due-per-s", 0, "schedule the jobs at this many a second (0: all available at once)")
	flag.DurationVar(&c.lead, "lead", 3*time.Second, "with --due-per-s: the first job is due this long after the start")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
	// River's defaults (100 ms, 1 s) cap a queue at MaxWorkers jobs per
	// 100 ms; the benchmark runs it as tuned for throughput.
	flag.DurationVar(&c.cooldown, "fetch-cooldown", river.FetchCooldownMin, "River's FetchCooldown: the least time between two fetches of jobs")
	flag.DurationVar(&c.poll, "fetch-poll-interval", 20*time.Millisecond, "River's FetchPollInterval: a fetch at least this often, without a notification")
	flag.Parse()
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		os.Exit(2)
	}
	r, err := run(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "river-bench:", err)
		os.Exit(1)
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func (c config) check() error {
	switch {
	case c.dsn == "":
		return errors.New("--dsn is empty and $SHARDKIT_TEST_POSTGRES_DSN is unset (eval \"$(bash scripts/services.sh env)\")")
	case c.jobs < 1:
		return fmt.Errorf("--jobs %d: want at least 1", c.jobs)
	case c.workers < 1 || c.workers > 10_000:
		return fmt.Errorf("--workers %d: want 1 to 10000", c.workers)
	case c.insertBatch < 1:
		return fmt.Errorf("--insert-batch %d: want at least 1", c.insertBatch)
	case c.duePerS < 0:
		return fmt.Errorf("--due-per-s %g: want 0 or more", c.duePerS)
	case pgx.Identifier{c.schema}.Sanitize() != `"`+c.schema+`"` || c.schema == "":
		return fmt.Errorf("--schema %q: want a plain identifier", c.schema)
	}
	return nil
}

func run(c config) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	pcfg, err := pgxpool.ParseConfig(c.dsn)
	if err != nil {
		return nil, fmt.Errorf("--dsn: %w", err)
	}
	pcfg.MaxConns = int32(min(c.workers+10, 100))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{c.schema}.Sanitize()); err != nil {
		return nil, fmt.Errorf("creating schema %s: %w", c.schema, err)
	}
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: c.schema})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrating River's tables in %s: %w", c.schema, err)
	}
	if _, err := pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{c.schema, "river_job"}.Sanitize()); err != nil {
		return nil, fmt.Errorf("emptying %s.river_job: %w", c.schema, err)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &NoopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            c.schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.workers}},
		Workers:           workers,
		FetchCooldown:     c.cooldown,
		FetchPollInterval: c.poll,
	})
	if err != nil {
		return nil, err
	}
	// Every completion, seen by the client that worked it; a channel
	// large enough that River drops none.
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: c.jobs + 1000})
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = client.Stop(sctx)
	}()

	start := time.Now()
	var first time.Time
	if c.duePerS > 0 {
		first = start.Add(c.lead)
	}
	for i := 0; i < c.jobs; i += c.insertBatch {
		n := min(c.insertBatch, c.jobs-i)
		params := make([]river.InsertManyParams, n)
		for j := range params {
			params[j] = river.InsertManyParams{Args: NoopArgs{}}
			if c.duePerS > 0 {
				at := first.Add(time.Duration(float64(i+j) / c.duePerS * float64(time.Second)))
				params[j].InsertOpts = &river.InsertOpts{ScheduledAt: at}
			}
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return nil, fmt.Errorf("inserting jobs %d to %d: %w", i, i+n, err)
		}
	}
	insertS := time.Since(start).Seconds()

	hist := hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
	for done := 0; done < c.jobs; done++ {
		select {
		case ev := <-events:
			j := ev.Job
			var d time.Duration
			if c.duePerS > 0 {
				if j.AttemptedAt != nil {
					d = j.AttemptedAt.Sub(j.ScheduledAt)
				}
			} else if j.FinalizedAt != nil {
				d = j.FinalizedAt.Sub(j.CreatedAt)
			}
			_ = hist.RecordValue(max(int64(d/time.Microsecond), 1))
		case <-ctx.Done():
			return nil, fmt.Errorf("%d of %d jobs completed in %v", done, c.jobs, c.timeout)
		}
	}
	total := time.Since(start).Seconds()
	r := &result{System: "river", Mode: "throughput", Jobs: c.jobs, Workers: c.workers, InsertS: insertS, TotalS: total,
		JobsPerS: float64(c.jobs) / total, Measured: "insert to completion",
		P50Ms: float64(hist.ValueAtQuantile(50)) / 1000, P99Ms: float64(hist.ValueAtQuantile(99)) / 1000, MaxMs: float64(hist.Max()) / 1000}
	if c.duePerS > 0 {
		r.Mode, r.DuePerS, r.Measured = "timers", c.duePerS, "scheduled time to first attempt (lateness)"
		r.JobsPerS = float64(c.jobs) / (total - c.lead.Seconds())
	}
	return r, nil
}
