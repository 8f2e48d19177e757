package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/examples/goals"
	goalsv1 "github.com/shardkit/shardkit/examples/goals/v1"
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usage(format string, a ...any) error {
	return &exitError{2, fmt.Errorf(format, a...)}
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{Use: "goals-client", Short: "Ask goals-servers through the shardkit cache client", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(getCmd(), benchCmd())
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "goals-client: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

type clientFlags struct {
	hostsFile            string
	hedgeDelay, ping     time.Duration
	hostTimeout, timeout time.Duration
	counters, perCounter int
	verbose              bool
}

func (f *clientFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.hostsFile, "hosts", "", "file of \"DC HOST:PORT\" lines, re-read every ping period (required)")
	fl.DurationVar(&f.hedgeDelay, "hedge-delay", 0, "0: send to every replica at once; > 0: nearest first, others after this delay")
	fl.DurationVar(&f.ping, "ping-period", time.Second, "host refresh and ping period")
	fl.DurationVar(&f.hostTimeout, "host-timeout", time.Second, "timeout of one request to one host")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "timeout of one Get")
	fl.IntVar(&f.counters, "counters", 100, "demo counters (as given to goals-server seed)")
	fl.IntVar(&f.perCounter, "goals", 8, "demo goals per counter (as given to goals-server seed)")
	fl.BoolVar(&f.verbose, "verbose", false, "log client warnings to stderr")
}

func (f *clientFlags) client(ctx context.Context, reg prometheus.Registerer, stderr io.Writer) (*goals.Client, error) {
	if f.hostsFile == "" {
		return nil, usage("--hosts is required")
	}
	log := slog.New(slog.DiscardHandler)
	if f.verbose {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	c, err := cache.New(ctx, goals.Description(), cache.Options{
		Resolver: cache.FileResolver{Path: f.hostsFile}, PingPeriod: f.ping, HedgeDelay: f.hedgeDelay,
		HostTimeout: f.hostTimeout, GetTimeout: f.timeout, Registerer: reg, Logger: log,
	})
	if err != nil {
		if errors.Is(err, cache.ErrInvalid) {
			return nil, &exitError{2, err}
		}
		return nil, err
	}
	return c, nil
}

func getCmd() *cobra.Command {
	var (
		f     clientFlags
		hits  []string
		demo  int
		check bool
	)
	cmd := &cobra.Command{
		Use:   "get",
		Short: "Match hits and print \"WATCH_ID COUNTER_ID GOAL_IDS\" per answered hit (exit 1 if some hits have no answer)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var batch []*goalsv1.Hit
			for _, s := range hits {
				h, err := parseHit(s)
				if err != nil {
					return usage("--hit %q: %v", s, err)
				}
				batch = append(batch, h)
			}
			for i := range demo {
				batch = append(batch, goals.DemoHit(i, f.counters, f.perCounter))
			}
			if len(batch) == 0 {
				return usage("give --hit COUNTER:WATCH:URL (repeatable) or --demo N")
			}
			c, err := f.client(cmd.Context(), nil, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			// A Get that ends with keys unanswered still returns the values
			// of the answered ones: print those, then fail naming the rest.
			got, err := c.Get(ctx, batch)
			var missing *cache.MissingKeysError[uint64]
			if err != nil && !errors.As(err, &missing) {
				return err
			}
			unanswered := map[uint64]bool{}
			if missing != nil {
				for _, id := range missing.IDs {
					unanswered[id] = true
				}
			}
			expected := goalsRules(f, check)
			wrong, printed := 0, 0
			for _, h := range batch {
				if unanswered[h.GetWatchId()] {
					continue
				}
				printed++
				ids := got[h.GetWatchId()]
				fmt.Fprintf(cmd.OutOrStdout(), "%d %d %s\n", h.GetWatchId(), h.GetCounterId(), joinIDs(ids))
				if expected != nil && !goals.Equal(ids, expected.Match(h.GetCounterId(), h.GetUrl())) {
					wrong++
				}
			}
			if wrong > 0 {
				err = errors.Join(fmt.Errorf("%d of %d answers differ from the demo goals", wrong, printed), err)
			}
			if missing != nil {
				return fmt.Errorf("printed the %d answered hits; %d hits have no answer: %w", printed, len(batch)-printed, err)
			}
			return err
		},
	}
	f.register(cmd)
	cmd.Flags().StringArrayVar(&hits, "hit", nil, "a hit COUNTER_ID:WATCH_ID:URL (repeatable)")
	cmd.Flags().IntVar(&demo, "demo", 0, "add N demo hits")
	cmd.Flags().BoolVar(&check, "check", false, "check the answers against the demo goals")
	return cmd
}

func goalsRules(f clientFlags, check bool) *goals.Rules {
	if !check {
		return nil
	}
	r, err := goals.NewRules(goals.DemoGoals(f.counters, f.perCounter))
	if err != nil {
		panic(err) // the demo goals are valid by construction
	}
	return r
}

func parseHit(s string) (*goalsv1.Hit, error) {
	parts := strings.SplitN(s, ":", 3)
	if len(parts) != 3 {
		return nil, errors.New("want COUNTER_ID:WATCH_ID:URL")
	}
	counter, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("counter id: %w", err)
	}
	watch, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("watch id: %w", err)
	}
	return &goalsv1.Hit{CounterId: counter, WatchId: watch, Url: parts[2]}, nil
}

func joinIDs(ids []uint64) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(s, ",")
}

func benchCmd() *cobra.Command {
	var (
		f                        clientFlags
		requests, conc, batchLen int
		check                    bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Send demo Gets and print latency percentiles and server requests per logical shard request",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if requests < 1 || conc < 1 || batchLen < 1 {
				return usage("--requests, --concurrency and --batch must be >= 1")
			}
			reg := prometheus.NewRegistry()
			c, err := f.client(cmd.Context(), reg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer c.Close()
			res := goals.RunLoad(cmd.Context(), c, goals.LoadConfig{
				Requests: requests, Concurrency: conc, Batch: batchLen, Counters: f.counters, PerCounter: f.perCounter,
				Timeout: f.timeout, Expected: goalsRules(f, check),
			})
			sent, logical := goals.RequestCounts(reg)
			fmt.Fprintf(cmd.OutOrStdout(), "%s requests_per_logical=%.3f\n", res.Summary(), sent/max(logical, 1))
			if res.Errors > 0 || res.Mismatches > 0 {
				return fmt.Errorf("%d Gets failed, %d answers wrong (first error: %w)", res.Errors, res.Mismatches, res.FirstError)
			}
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().IntVar(&requests, "requests", 1000, "number of Gets")
	cmd.Flags().IntVar(&conc, "concurrency", 1, "concurrent Gets")
	cmd.Flags().IntVar(&batchLen, "batch", 30, "hits per Get")
	cmd.Flags().BoolVar(&check, "check", false, "check the answers against the demo goals")
	return cmd
}
