package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/cache/lease"
	"github.com/shardkit/shardkit/examples/goals"
	goalsv1 "github.com/shardkit/shardkit/examples/goals/v1"
)

const (
	exitLeaseLost = 3
	exitUsage     = 2
)

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	root := &cobra.Command{Use: "goals-server", Short: "Example sharded goals matcher on the shardkit cache template", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(serveCmd(), seedCmd(), rangesCmd())
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "goals-server: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

type serveFlags struct {
	listen, advertise, dc, addrFile, metricsListen string
	leaseDriver, leaseDSN, leaseTable              string
	goalsDriver, goalsDSN, goalsTable              string
	ttl, pingPeriod, margin, delay                 time.Duration
	logJSON                                        bool
}

func serveCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Claim a shard lease and serve the goals of its counters",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:7001", "gRPC listen address (port 0: any free port)")
	fl.StringVar(&f.advertise, "advertise", "", "address clients use and the lease table shows (default: the bound listen address)")
	fl.StringVar(&f.dc, "dc", "", "datacenter of this server (required)")
	fl.StringVar(&f.addrFile, "addr-file", "", "write the bound gRPC address to this file once listening")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus /metrics on this address (empty: off)")
	fl.StringVar(&f.leaseDriver, "lease-driver", "sqlite", "lease store: sqlite, mysql, postgres, or shardkit (a cluster's leases)")
	fl.StringVar(&f.leaseDSN, "lease-dsn", "", "lease store DSN (shardkit: a cluster instance host:port) (required)")
	fl.StringVar(&f.leaseTable, "lease-table", lease.DefaultTable, "lease table name (shardkit: lease name namespace)")
	fl.StringVar(&f.goalsDriver, "goals-driver", "sqlite", "goals table driver: sqlite, mysql, postgres")
	fl.StringVar(&f.goalsDSN, "goals-dsn", "", "goals table DSN (required)")
	fl.StringVar(&f.goalsTable, "goals-table", "goals", "goals table name")
	fl.DurationVar(&f.ttl, "lease-ttl", 10*time.Second, "shard lease TTL")
	fl.DurationVar(&f.pingPeriod, "lease-ping", 0, "lease ping period (default TTL/5)")
	fl.DurationVar(&f.margin, "lease-margin", 0, "stop answering this long before the lease could expire (default TTL/5)")
	fl.DurationVar(&f.delay, "delay", 0, "add this delay to every non-empty request (to play a slow replica)")
	fl.BoolVar(&f.logJSON, "log-json", false, "log JSON instead of text")
	return cmd
}

func serve(ctx context.Context, f serveFlags) error {
	if f.dc == "" || f.leaseDSN == "" || f.goalsDSN == "" {
		return &exitError{exitUsage, errors.New("--dc, --lease-dsn and --goals-dsn are required")}
	}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, nil)
	if f.logJSON {
		handler = slog.NewJSONHandler(os.Stderr, nil)
	}
	log := slog.New(handler).With("dc", f.dc)

	// A lease table that init-leases has not made is refused at once,
	// before listening (and an SQLite file is not created empty).
	store, err := lease.OpenExisting(f.leaseDriver, f.leaseDSN, f.leaseTable)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer store.Close()
	if err := checkLeaseTable(ctx, store, f); err != nil {
		return err
	}
	goalsDB, err := openGoalsDB(f.goalsDriver, f.goalsDSN)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer goalsDB.Close()

	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("listen %s: %w", f.listen, err)}
	}
	addr := lis.Addr().String()
	if f.advertise == "" {
		f.advertise = addr
	}
	log = log.With("host", f.advertise)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Serve at once: until a lease is held and the goals are loaded, every
	// request is refused with FailedPrecondition (no shard).
	shards := &keeperSource{}
	svc := goals.NewService(shards, cache.NewServerMetrics(reg))
	svc.SetDelay(f.delay)
	srv := grpc.NewServer()
	goalsv1.RegisterGoalsMatcherServiceServer(srv, svc)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	defer srv.Stop()
	if f.addrFile != "" {
		if err := writeFileAtomic(f.addrFile, addr); err != nil {
			return err
		}
	}
	if f.metricsListen != "" {
		ms := &http.Server{Addr: f.metricsListen, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go ms.ListenAndServe() //nolint:errcheck // best effort; ends with Close
		defer ms.Close()
	}
	log.Info("listening; claiming a shard lease", "addr", addr)

	keeper, err := lease.Acquire(ctx, lease.KeeperConfig{
		Store: store, DC: f.dc, Host: f.advertise, TTL: f.ttl, PingPeriod: f.pingPeriod, Margin: f.margin,
		Logger: log, Registerer: reg,
		OnLost: func(_ lease.Lease, err error) { cancel(err) },
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for a shard
		}
		return fmt.Errorf("claim a shard: %w", err)
	}
	shards.set(keeper)
	l := keeper.Lease()
	log = log.With("shard", l.Shard, "range", l.Range.String(), "epoch", l.Epoch)
	// The keeper has its own context: on shutdown the gRPC server stops
	// first, and only then is the lease released.
	kctx, kstop := context.WithCancel(context.WithoutCancel(ctx))
	defer kstop()
	keeperDone := make(chan error, 1)
	go func() { keeperDone <- keeper.Run(kctx) }()

	start := time.Now()
	rules, err := goals.LoadRules(ctx, goalsDB, f.goalsTable, l.Range)
	if err != nil {
		kstop()
		kerr := <-keeperDone
		if lost := leaseLost(ctx, kerr); lost != nil {
			log.Error("shard lease lost while loading the goals; exiting so that a restart claims a shard afresh", "err", lost)
			return lost
		}
		if kerr != nil {
			log.Warn("shard lease ended with an error", "err", kerr)
		}
		if ctx.Err() != nil {
			return nil // stopped while loading
		}
		return fmt.Errorf("load goals: %w", err)
	}
	svc.SetRules(rules)
	log.Info("serving", "goals", rules.Len(), "load_time", time.Since(start).String())

	select {
	case err := <-serveErr:
		kstop()
		if kerr := <-keeperDone; kerr != nil {
			log.Warn("shard lease ended with an error", "err", kerr)
		}
		return fmt.Errorf("grpc server: %w", err)
	case <-ctx.Done():
	}
	srv.Stop() // answer nothing more, before the lease is released
	kstop()
	kerr := <-keeperDone
	if lost := leaseLost(ctx, kerr); lost != nil {
		log.Error("shard lease lost; exiting so that a restart claims a shard afresh", "err", lost)
		return lost
	}
	log.Info("stopped; lease released")
	return nil
}

// checkLeaseTable refuses a lease table without shards for the server's
// DC (missing, or not initialised for it), naming the command that makes
// them. Other errors (the database unreachable for now) are left to the
// keeper, which retries.
func checkLeaseTable(ctx context.Context, store lease.Store, f serveFlags) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := store.Rows(cctx, f.dc)
	if !errors.Is(err, lease.ErrNotInitialized) {
		return nil
	}
	return &exitError{exitUsage, fmt.Errorf("lease table %q at %s has no shards for dc %q (%w); create them with `shardkit cache init-leases --driver %s --dsn %s --table %s --dc %s --shards N` (or --ranges FILE)",
		f.leaseTable, f.leaseDSN, f.dc, err, f.leaseDriver, f.leaseDSN, f.leaseTable, f.dc)}
}

// leaseLost returns the exit error (code exitLeaseLost) when ctx was
// cancelled by the keeper's OnLost or the keeper's Run ended with ErrLost;
// otherwise nil.
func leaseLost(ctx context.Context, kerr error) error {
	cause := context.Cause(ctx)
	if !errors.Is(cause, lease.ErrLost) {
		if !errors.Is(kerr, lease.ErrLost) {
			return nil
		}
		cause = kerr
	}
	return &exitError{exitLeaseLost, fmt.Errorf("shard lease lost: %w", cause)}
}

// keeperSource holds no shard until a keeper is set.
type keeperSource struct {
	k atomic.Pointer[lease.Keeper]
}

func (s *keeperSource) set(k *lease.Keeper) { s.k.Store(k) }

func (s *keeperSource) Current() (cache.Shard, bool) {
	k := s.k.Load()
	if k == nil {
		return cache.Shard{}, false
	}
	return cache.LeaseShards(k).Current()
}

func openGoalsDB(driver, dsn string) (*sql.DB, error) {
	name := driver
	switch driver {
	case "sqlite":
		d, err := lease.SQLiteDSN(dsn)
		if err != nil {
			return nil, err
		}
		dsn = d
	case "mysql":
	case "postgres", "pgx":
		name = "pgx"
	default:
		return nil, fmt.Errorf("--goals-driver %q: use sqlite, mysql or postgres", driver)
	}
	db, err := sql.Open(name, dsn)
	if err != nil {
		return nil, fmt.Errorf("open goals database: %w", err)
	}
	return db, nil
}

func placeholder(driver string) func(int) string {
	if driver == "postgres" || driver == "pgx" {
		return func(i int) string { return "$" + strconv.Itoa(i) }
	}
	return func(int) string { return "?" }
}

func writeFileAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func seedCmd() *cobra.Command {
	var (
		driver, dsn, table   string
		counters, perCounter int
	)
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Create the goals table and fill it with demo goals (replacing its rows)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" || counters < 1 || perCounter < 1 || counters > 1000 {
				return &exitError{exitUsage, errors.New("--goals-dsn, --counters (1..1000) and --goals (>= 1) are required")}
			}
			db, err := openGoalsDB(driver, dsn)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			defer db.Close()
			if err := goals.SeedDemo(cmd.Context(), db, table, counters, perCounter, placeholder(driver)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "seeded %d goals of %d counters into %s\n", counters*perCounter, counters, table)
			return nil
		},
	}
	cmd.Flags().StringVar(&driver, "goals-driver", "sqlite", "goals table driver: sqlite, mysql, postgres")
	cmd.Flags().StringVar(&dsn, "goals-dsn", "", "goals table DSN")
	cmd.Flags().StringVar(&table, "goals-table", "goals", "goals table name")
	cmd.Flags().IntVar(&counters, "counters", 100, "demo counters")
	cmd.Flags().IntVar(&perCounter, "goals", 8, "goals per counter")
	return cmd
}

func rangesCmd() *cobra.Command {
	var counters, shards int
	cmd := &cobra.Command{
		Use:   "demo-ranges --counters N --shards S",
		Short: "Print a ranges file that splits demo counters 1..N into S shards (for shardkit cache init-leases --ranges)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := goals.DemoRanges(counters, shards)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# demo counters 1..%d in %d shards\n", counters, shards)
			_, err = cmd.OutOrStdout().Write(lease.FormatRanges(rs))
			return err
		},
	}
	cmd.Flags().IntVar(&counters, "counters", 100, "demo counters")
	cmd.Flags().IntVar(&shards, "shards", 3, "shards")
	return cmd
}
