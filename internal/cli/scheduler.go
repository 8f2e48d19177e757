package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/certs"
	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/grpcapi"
	"github.com/shardkit/shardkit/scheduler/grpcstage"
	"github.com/shardkit/shardkit/scheduler/pgstore"
)

// schedulerConfig is `shardkit scheduler run --config`'s file
// (docs/scheduler.md, "Running it").
type schedulerConfig struct {
	Store struct {
		// Shardkit is the default store: a shardkit cluster.
		Shardkit struct {
			Peers    []string `yaml:"peers"`
			Prefix   string   `yaml:"prefix"`
			CertsDir string   `yaml:"certs_dir"`
			User     string   `yaml:"user"`
		} `yaml:"shardkit"`
		// Postgres, when set, is the PostgreSQL store's connection string.
		Postgres string `yaml:"postgres"`
		Schema   string `yaml:"schema"`
		Shards   int    `yaml:"shards"`
	} `yaml:"store"`
	Changelog struct {
		Brokers []string `yaml:"brokers"`
		Topic   string   `yaml:"topic"`
	} `yaml:"changelog"`
	HTTPListen string `yaml:"http_listen"`
	// GRPCListen serves shardkit.scheduler.v1.OfferService (the offer and
	// state API) there.
	GRPCListen string `yaml:"grpc_listen"`
	Runner     struct {
		Owner       string        `yaml:"owner"`
		LeaseTTL    time.Duration `yaml:"lease_ttl"`
		MaxChain    int           `yaml:"max_chain"`
		RescanEvery time.Duration `yaml:"rescan_every"`
		// PollInterval is how often the runner reads every held shard
		// with no wake-up (Config.PollInterval: a safety net for a lost
		// wake-up).
		PollInterval time.Duration `yaml:"poll_interval"`
	} `yaml:"runner"`
	Stages []stageConfig `yaml:"stages"`
}

// stageConfig is one external stage of the file.
type stageConfig struct {
	ID          string        `yaml:"id"`
	Address     string        `yaml:"address"`
	Fields      []string      `yaml:"fields"`
	OwnFields   []string      `yaml:"own_fields"`
	RateLimit   float64       `yaml:"rate_limit"`
	Burst       int           `yaml:"burst"`
	MaxParallel int           `yaml:"max_parallel"`
	MaxAttempts int           `yaml:"max_attempts"`
	Timeout     time.Duration `yaml:"timeout"`
	AfterSave   bool          `yaml:"after_save"`
}

// parseSchedulerConfig reads a scheduler's file, refusing what it does
// not know and what it lacks, naming the key.
func parseSchedulerConfig(data []byte) (*schedulerConfig, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c schedulerConfig
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the file holds more than one YAML document")
	}
	sk := c.Store.Shardkit
	if c.Store.Postgres != "" && (len(sk.Peers) > 0 || sk.Prefix != "" || sk.CertsDir != "" || sk.User != "") {
		return nil, errors.New("store: give store.postgres or store.shardkit, not both")
	}
	if c.Store.Postgres == "" && c.Store.Schema != "" {
		return nil, errors.New("store.schema: a PostgreSQL store's; the shardkit store's spaces are named by store.shardkit.prefix")
	}
	if c.Store.Postgres == "" {
		if len(sk.Peers) == 0 {
			return nil, errors.New("store: give store.shardkit.peers (the cluster's addresses) or store.postgres (a PostgreSQL connection string)")
		}
		if _, err := client.ParsePeers(strings.Join(sk.Peers, ",")); err != nil {
			return nil, fmt.Errorf("store.shardkit.peers: %w", err)
		}
	}
	if c.Store.Shards < 0 {
		return nil, fmt.Errorf("store.shards %d: want 1 or more (0: an existing store's)", c.Store.Shards)
	}
	if (len(c.Changelog.Brokers) == 0) != (c.Changelog.Topic == "") {
		return nil, errors.New("changelog: give both brokers and topic, or neither")
	}
	for _, l := range []struct{ key, addr string }{{"http_listen", c.HTTPListen}, {"grpc_listen", c.GRPCListen}} {
		if _, _, err := net.SplitHostPort(l.addr); l.addr != "" && err != nil {
			return nil, fmt.Errorf("%s %q: want host:port", l.key, l.addr)
		}
	}
	if len(c.Stages) == 0 {
		return nil, errors.New("stages: give at least one")
	}
	seen := map[string]bool{}
	for i, s := range c.Stages {
		where := fmt.Sprintf("stages[%d]", i)
		if err := scheduler.ValidateID("stage", s.ID); err != nil {
			return nil, fmt.Errorf("%s.id: %w", where, err)
		}
		where = fmt.Sprintf("stage %q", s.ID)
		if seen[s.ID] {
			return nil, fmt.Errorf("%s is given twice", where)
		}
		seen[s.ID] = true
		if _, _, err := net.SplitHostPort(s.Address); err != nil {
			return nil, fmt.Errorf("%s: address %q: want host:port of its StageService", where, s.Address)
		}
		if s.RateLimit < 0 || s.Burst < 0 || s.MaxParallel < 0 || s.MaxAttempts < 0 || s.Timeout < 0 {
			return nil, fmt.Errorf("%s: rate_limit, burst, max_parallel, max_attempts and timeout must not be negative", where)
		}
	}
	return &c, nil
}

func newSchedulerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "scheduler", Short: "The stage scheduler: run stages served over gRPC, and look at its queues (docs/scheduler.md)"}
	var configPath string
	run := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run a scheduler whose stages are programs serving shardkit.scheduler.v1.StageService, until stopped",
		Long: `Run a scheduler whose stages are all external: each stage of the file is a
program serving shardkit.scheduler.v1.StageService (api/scheduler/v1) at its
address. The runner holds its share of the store's shards, works the stages'
queues, and, with a changelog, relays every save to Kafka. Several processes
of one file split the shards through the store's leases. /metrics on
http_listen. Runs until Ctrl-C (docs/scheduler.md, "Running it").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runScheduler(cmd, configPath) },
	}
	run.Flags().StringVar(&configPath, "config", "", "the scheduler's YAML file (required)")

	var st storeFlags
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each stage's queue: its depth and its earliest entry's lag",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, &st, "scheduler status", func(ctx context.Context, s scheduler.Store) error {
				return schedulerStatus(ctx, s, st.stages, cmd.OutOrStdout())
			})
		},
	}
	st.register(status)
	status.Flags().StringVar(&st.stages, "stages", "", "the stages to show, comma-separated (required: the store keeps queues, not a list of stages)")

	var dl storeFlags
	var limit int
	dead := &cobra.Command{
		Use:   "dead-letters STAGE",
		Short: "List the offers a stage gave up on, with why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, &dl, "scheduler dead-letters", func(ctx context.Context, s scheduler.Store) error {
				ls, err := s.DeadLetters(ctx, args[0], limit)
				if err != nil {
					return err
				}
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "OFFER\tATTEMPTS\tAT\tCAUSE")
				for _, l := range ls {
					fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", l.OfferID, l.Attempts, l.At.UTC().Format(time.RFC3339), l.Cause)
				}
				return w.Flush()
			})
		},
	}
	dl.register(dead)
	dead.Flags().IntVar(&limit, "limit", 100, "list at most this many")

	var rq storeFlags
	requeue := &cobra.Command{
		Use:   "requeue STAGE OFFER_ID",
		Short: "Put a dead letter back into its stage's queue, due now",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withStore(cmd, &rq, "scheduler requeue", func(ctx context.Context, s scheduler.Store) error {
				if err := s.Requeue(ctx, args[0], args[1], time.Now()); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "requeued %s in stage %s\n", args[1], args[0])
				return nil
			})
		},
	}
	rq.register(requeue)

	var to tailOptions
	tail := &cobra.Command{
		Use:   "tail --brokers B[,B] --topic T",
		Short: "Print the scheduler's changelog from Kafka, for people",
		Long: `Print the scheduler's changelog from its Kafka topic as it comes: one line
per saved offer (its id, version, the stage that saved it and its state's
version, then the body), or each record's JSON as it is (--format json).
From the topic's end unless --from-start; until Ctrl-C or --limit records.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return tailScheduler(cmd, &to) },
	}
	tf := tail.Flags()
	tf.StringVar(&to.brokers, "brokers", "", "Kafka's seed brokers, host:port, comma-separated (required)")
	tf.StringVar(&to.topic, "topic", "", "the changelog's topic (required)")
	tf.BoolVar(&to.fromStart, "from-start", false, "read the topic from its start, not from its end")
	tf.IntVar(&to.limit, "limit", 0, "stop after this many records (0: never)")
	tf.StringVar(&to.format, "format", "text", "text (a line per record) or json (each record's value)")
	cmd.AddCommand(run, status, dead, requeue, tail, newSchedulerBenchCmd())
	return cmd
}

type tailOptions struct {
	brokers, topic, format string
	fromStart              bool
	limit                  int
}

func tailScheduler(cmd *cobra.Command, o *tailOptions) error {
	what := "scheduler tail"
	if o.brokers == "" || o.topic == "" {
		return usagef("%s: give --brokers and --topic", what)
	}
	if o.format != "text" && o.format != "json" {
		return usagef("%s: invalid --format %q: want text or json", what, o.format)
	}
	if o.limit < 0 {
		return usagef("%s: --limit %d: want 0 or more", what, o.limit)
	}
	start := kgo.NewOffset().AtEnd()
	if o.fromStart {
		start = kgo.NewOffset().AtStart()
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(splitList([]string{o.brokers})...), kgo.ConsumeTopics(o.topic), kgo.ConsumeResetOffset(start))
	if err != nil {
		return usagef("%s: %v", what, err)
	}
	defer kc.Close()
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	for n := 0; o.limit == 0 || n < o.limit; {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return prefixExit(what, fmt.Errorf("topic %s partition %d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err))
		}
		for it := fs.RecordIter(); !it.Done() && (o.limit == 0 || n < o.limit); n++ {
			r := it.Next()
			if o.format == "json" {
				fmt.Fprintf(out, "%s\n", r.Value)
				continue
			}
			line, err := changelogLine(r.Value)
			if err != nil {
				line = fmt.Sprintf("partition %d offset %d: %v", r.Partition, r.Offset, err)
			}
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

// changelogLine is a changelog record for people: its offer, version, the
// stage that saved it and its state's version, and the body.
func changelogLine(value []byte) (string, error) {
	var r scheduler.Record
	if err := json.Unmarshal(value, &r); err != nil {
		return "", fmt.Errorf("not a changelog record (scheduler.Record as JSON): %w", err)
	}
	if r.OfferID == "" {
		return "", errors.New("not a changelog record: no offer_id")
	}
	by := "outside"
	if r.Stage != "" {
		by = fmt.Sprintf("stage %s (state v%d)", r.Stage, r.StateVersion)
	}
	return fmt.Sprintf("%s %s v%d by %s: %s", r.Time.UTC().Format(time.RFC3339Nano), r.OfferID, r.OfferVersion, by, r.Body), nil
}

// storeFlags name the store of the commands that look at one: the
// shardkit cluster at --peer (the default store), or PostgreSQL with
// --postgres.
type storeFlags struct {
	cluster                          clusterFlags
	postgres, schema, prefix, stages string
}

func (f *storeFlags) register(c *cobra.Command) {
	f.cluster.register(c.Flags(), 30*time.Second, "how long the command may take")
	c.Flags().StringVar(&f.prefix, "prefix", clusterstore.DefaultPrefix, "the shardkit store's prefix (its spaces are <prefix>_offers, ...)")
	c.Flags().StringVar(&f.postgres, "postgres", os.Getenv("SHARDKIT_SCHEDULER_POSTGRES"), "a PostgreSQL store's connection string instead of the cluster at --peer (default $SHARDKIT_SCHEDULER_POSTGRES)")
	c.Flags().StringVar(&f.schema, "schema", pgstore.DefaultSchema, "with --postgres: the store's schema")
}

func withStore(cmd *cobra.Command, f *storeFlags, what string, do func(context.Context, scheduler.Store) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), max(f.cluster.timeout, time.Second))
	defer cancel()
	var s scheduler.Store
	if f.postgres != "" {
		ps, err := pgstore.Open(ctx, f.postgres, pgstore.Options{Schema: f.schema})
		if err != nil {
			return prefixExit(what, err)
		}
		s = ps
	} else {
		c, err := f.cluster.client(ctx)
		if err != nil {
			return usagef("%s: %v", what, err)
		}
		defer c.Close()
		cs, err := clusterstore.Open(ctx, c, clusterstore.Options{Prefix: f.prefix})
		if err != nil {
			return prefixExit(what, err)
		}
		s = cs
	}
	defer s.Close()
	if err := do(ctx, s); err != nil {
		return prefixExit(what, err)
	}
	return nil
}

// openSchedulerStore opens the store of a scheduler's file, and says how
// its changelog reaches Kafka: run(ctx) relays until ctx ends.
func openSchedulerStore(ctx context.Context, c *schedulerConfig, log *slog.Logger) (s scheduler.Store, run func(context.Context) error, closeAll func(), err error) {
	if c.Store.Postgres != "" {
		ps, err := pgstore.Open(ctx, c.Store.Postgres, pgstore.Options{Schema: c.Store.Schema, Shards: c.Store.Shards})
		if err != nil {
			return nil, nil, nil, err
		}
		closeAll = func() { ps.Close() }
		if c.Changelog.Topic != "" {
			relay, err := pgstore.NewRelay(ps, pgstore.RelayConfig{Brokers: c.Changelog.Brokers, Topic: c.Changelog.Topic, Logger: log})
			if err != nil {
				ps.Close()
				return nil, nil, nil, err
			}
			closeAll = func() { relay.Close(); ps.Close() }
			run = relay.Run
		}
		return ps, run, closeAll, nil
	}
	sk := c.Store.Shardkit
	var creds credentials.TransportCredentials
	if sk.CertsDir != "" {
		user := sk.User
		if user == "" {
			user = certs.RootUser
		}
		if creds, err = client.LoadCredentials(sk.CertsDir, user); err != nil {
			return nil, nil, nil, fmt.Errorf("store.shardkit.certs_dir %s, user %s: %w", sk.CertsDir, user, err)
		}
	}
	cl, err := client.New(ctx, client.Config{Peers: sk.Peers, Credentials: creds})
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := clusterstore.Open(ctx, cl, clusterstore.Options{Prefix: sk.Prefix, Shards: c.Store.Shards})
	if err != nil {
		_ = cl.Close()
		return nil, nil, nil, err
	}
	if c.Changelog.Topic != "" {
		cfg := cs.Changelog()
		cfg.Brokers, cfg.Topic, cfg.Logger = c.Changelog.Brokers, c.Changelog.Topic, log
		run = func(ctx context.Context) error { return changefeed.Run(ctx, cfg) }
	}
	return cs, run, func() { _ = cl.Close() }, nil
}

// schedulerStatus prints each stage's queue depth and how late its
// earliest entry is (0 when it is not due yet).
func schedulerStatus(ctx context.Context, s scheduler.Store, stages string, out io.Writer) error {
	ids := splitList([]string{stages})
	if len(ids) == 0 {
		return usagef("scheduler status: give --stages")
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "STAGE\tQUEUED\tEARLIEST DUE\tLAG")
	for _, id := range ids {
		depth, earliest, err := s.Stats(ctx, id)
		if err != nil {
			return err
		}
		due, lag := "-", "-"
		if !earliest.IsZero() {
			due = earliest.UTC().Format(time.RFC3339)
			lag = max(time.Since(earliest), 0).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", id, depth, due, lag)
	}
	return w.Flush()
}

func runScheduler(cmd *cobra.Command, path string) error {
	what := "scheduler run"
	if path == "" {
		return usagef("%s: give --config", what)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return usagef("%s: %v", what, err)
	}
	c, err := parseSchedulerConfig(data)
	if err != nil {
		return usagef("%s: %s: %v", what, path, err)
	}
	ctx := cmd.Context()
	log := newLogger("info", "text", cmd.ErrOrStderr())
	store, relay, closeStore, err := openSchedulerStore(ctx, c, log)
	if err != nil {
		return prefixExit(what, err)
	}
	defer closeStore()
	stages := make([]scheduler.StageConfig, 0, len(c.Stages))
	for _, s := range c.Stages {
		conn, err := grpc.NewClient(s.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return usagef("%s: stage %q: address %q: %v", what, s.ID, s.Address, err)
		}
		defer conn.Close()
		stages = append(stages, scheduler.StageConfig{
			ID: s.ID, Stage: grpcstage.New(conn, s.ID, grpcstage.Options{AfterSave: s.AfterSave}),
			Fields: s.Fields, OwnFields: s.OwnFields, RateLimit: rate.Limit(s.RateLimit), Burst: s.Burst,
			MaxParallel: s.MaxParallel, MaxAttempts: s.MaxAttempts, Timeout: s.Timeout,
		})
	}
	reg := prometheus.NewRegistry()
	r, err := scheduler.NewRunner(scheduler.Config{Store: store, Stages: stages, Owner: c.Runner.Owner, LeaseTTL: c.Runner.LeaseTTL,
		MaxChain: c.Runner.MaxChain, RescanEvery: c.Runner.RescanEvery, PollInterval: c.Runner.PollInterval, Logger: log, Registerer: reg})
	if err != nil {
		return usagef("%s: %v", what, err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(gctx) })
	if relay != nil {
		g.Go(func() error { return relay(gctx) })
	}
	if c.GRPCListen != "" {
		lis, err := net.Listen("tcp", c.GRPCListen)
		if err != nil {
			return usagef("%s: grpc_listen %q: %v", what, c.GRPCListen, err)
		}
		gs := grpc.NewServer()
		schedulerv1.RegisterOfferServiceServer(gs, grpcapi.Server(store))
		g.Go(func() error { return gs.Serve(lis) })
		g.Go(func() error {
			<-gctx.Done()
			gs.GracefulStop()
			return nil
		})
	}
	if c.HTTPListen != "" {
		lis, err := net.Listen("tcp", c.HTTPListen)
		if err != nil {
			return usagef("%s: http_listen %q: %v", what, c.HTTPListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	ids := make([]string, len(c.Stages))
	for i, st := range c.Stages {
		ids[i] = st.ID
	}
	log.Info("scheduler running", "stages", strings.Join(ids, ","), "owner", r.Owner())
	if err := g.Wait(); err != nil && !errors.Is(err, ctx.Err()) && !errors.Is(err, context.Canceled) {
		return prefixExit(what, err)
	}
	return nil
}
