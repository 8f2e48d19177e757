// Command feedlag runs a changefeed of a space beside a load (shardkit
// bench) and, when stopped (SIGTERM or SIGINT), prints as one JSON object
// the events the feed sent and their lag: from a batch's commit (its
// leader-stamped time) to Kafka's acknowledgement of its last record.
//
//	go build -o feedlag ./bench/feedlag
//	feedlag --peer 127.0.0.1:25301 --ready /tmp/ready &   # then run the load; then kill -TERM it
//
// Without --brokers it starts franz-go's kfake in this process (one
// broker, in memory, the Kafka protocol over loopback): the lag then has
// no broker disk or replication in it. scripts/bench-vs-etcd.sh runs it
// beside each shardkit run with CHANGEFEED=1 (docs/benchmarks.md, "Change
// streams").
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/bench"
	"github.com/shardkit/shardkit/tuple"
)

// result is what feedlag prints.
type result struct {
	Space   string `json:"space"`
	Parts   int    `json:"parts"`
	Brokers string `json:"brokers"`
	Format  string `json:"format"`
	// Events are the events sent (each with its records acknowledged);
	// CommitsS the time between the first and the last one's commit.
	Events   int     `json:"events"`
	CommitsS float64 `json:"commits_s"`
	// EventsPerS is Events over CommitsS.
	EventsPerS float64 `json:"events_per_s"`
	LagP50Ms   float64 `json:"lag_p50_ms"`
	LagP99Ms   float64 `json:"lag_p99_ms"`
	LagMaxMs   float64 `json:"lag_max_ms"`
	// CPUS is this process's user+system CPU (the feed, and kfake when
	// it runs here), over its whole run.
	CPUS float64 `json:"cpu_s"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "feedlag:", err)
		os.Exit(1)
	}
}

func run() error {
	peer := flag.String("peer", "", "the cluster's instances, host:port, comma-separated (required)")
	space := flag.String("space", bench.DefaultSpace, "the space fed (made with shardkit bench's definition when missing)")
	brokers := flag.String("brokers", "", "Kafka's brokers, comma-separated (default: kfake in this process)")
	topic := flag.String("topic", "shardkit.changes", "the topic (made in kfake; must exist on --brokers)")
	partitions := flag.Int("partitions", 8, "the topic's partitions in kfake")
	parts := flag.Int("parts", 8, "the feed's parts")
	format := flag.String("format", "json", "json or protobuf")
	ready := flag.String("ready", "", "a file written once every part of the feed started")
	flag.Parse()
	if *peer == "" {
		return errors.New("give --peer")
	}
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The feed runs on after the signal until it has sent what was
	// committed before (no event for a second; at most a minute), so that
	// the lag of the last events, when it falls behind, is counted.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New(ctx, client.Config{Peers: strings.Split(*peer, ","), Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ensureSpace(ctx, c, *space); err != nil {
		return err
	}
	seeds := strings.Split(*brokers, ",")
	if *brokers == "" {
		k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(*partitions), *topic))
		if err != nil {
			return fmt.Errorf("kfake: %w", err)
		}
		defer k.Close()
		seeds = k.ListenAddrs()
	}

	var mu sync.Mutex
	var lags []time.Duration
	var first, last, lastSent time.Time
	name := fmt.Sprintf("feedlag-%d", time.Now().UnixNano())
	cfg := changefeed.Config{Client: c, Spaces: []string{*space}, Brokers: seeds, Topic: *topic, Name: name,
		Format: *format, Parts: *parts, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Sent: func(_ uint32, _ uint64, committed time.Time) {
			lag := time.Since(committed)
			mu.Lock()
			lags = append(lags, lag)
			lastSent = time.Now()
			if first.IsZero() || committed.Before(first) {
				first = committed
			}
			if committed.After(last) {
				last = committed
			}
			mu.Unlock()
		}}
	done := make(chan error, 1)
	go func() { done <- changefeed.Run(ctx, cfg) }()
	if err := waitStarted(sig, c, name, *parts, done); err != nil {
		return err
	}
	if *ready != "" {
		if err := os.WriteFile(*ready, []byte(name+"\n"), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "feedlag: feed %s started (%d parts into %s)\n", name, *parts, strings.Join(seeds, ","))
	select {
	case err := <-done:
		return fmt.Errorf("the feed ended: %w", err)
	case <-sig.Done():
	}
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		mu.Lock()
		quiet := time.Since(lastSent) > time.Second
		mu.Unlock()
		if quiet {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		return err
	}

	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lags)
	r := result{Space: *space, Parts: *parts, Brokers: *brokers, Format: *format, Events: len(lags)}
	if r.Brokers == "" {
		r.Brokers = "kfake"
	}
	if n := len(lags); n > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		r.LagP50Ms, r.LagP99Ms, r.LagMaxMs = ms(lags[n/2]), ms(lags[min(n-1, n*99/100)]), ms(lags[n-1])
		r.CommitsS = last.Sub(first).Seconds()
		if r.CommitsS > 0 {
			r.EventsPerS = float64(n) / r.CommitsS
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUS = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// ensureSpace makes the space with shardkit bench's definition when it is
// missing, so that the feed can start before the load; a cluster just
// started may refuse for a while (no group-0 leader yet).
func ensureSpace(ctx context.Context, c *client.Client, space string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.CreateSpace(ctx, bench.SpaceDef(space), true)
		if err == nil || !client.IsRetryable(err) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("the space %s: %w", space, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitStarted waits until every part of feed name saved a cursor of its
// buckets (the changes committed after it are sent).
func waitStarted(ctx context.Context, c *client.Client, name string, parts int, done <-chan error) error {
	for {
		started := 0
		for i := range parts {
			res, _, err := c.Space(changefeed.CursorSpace).Select(ctx, []tuple.Value{tuple.String(name), tuple.Uint(uint64(i))}, client.RW)
			if err != nil || res.Tuple == nil {
				break
			}
			text, _ := res.Tuple[4].AsString()
			if cur, err := client.ParseCursor(text); err == nil && cur.Buckets() > 0 {
				started++
			}
		}
		if started == parts {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("the feed ended before it started: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
