package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc/credentials"

	"github.com/shardkit/shardkit/changefeed"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/pgstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs a subcommand: 0 on success (or Ctrl-C), 2 for bad flags, 1
// for other errors.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: offers run|put|consume [flags] (see the package comment)")
		return 2
	}
	fs := flag.NewFlagSet("offers "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o storeOptions
	fs.StringVar(&o.demo, "demo", "", "the data dir of a `shardkit demo --data-dir DIR`: its peers and certificates")
	fs.StringVar(&o.peers, "peer", "127.0.0.1:3301", "the shardkit cluster's addresses, comma-separated (the default store)")
	fs.StringVar(&o.certsDir, "certs-dir", "", "the cluster's client certificates (ca.crt, client.root.crt/.key); empty: plaintext")
	fs.StringVar(&o.postgres, "postgres", "", "a PostgreSQL connection string: the PostgreSQL store instead of the cluster")
	fs.StringVar(&o.name, "schema", "offers_example", "the store's schema (PostgreSQL) or the prefix of its spaces (shardkit)")
	brokers := fs.String("brokers", "", "Kafka's seed brokers, comma-separated (run: the changelog relay; consume)")
	topic := fs.String("topic", "offers-changelog", "the changelog's topic")
	limit := fs.Int("limit", 0, "consume: stop after this many records, repeats included (0: never)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runStages(ctx, o, *brokers, *topic, stderr)
	case "put":
		if fs.NArg() != 2 {
			fmt.Fprintln(stderr, "usage: offers put ID JSON [--demo DIR | --peer ADDRS | --postgres DSN]")
			return 2
		}
		err = put(ctx, o, fs.Arg(0), fs.Arg(1), stdout)
	case "consume":
		err = consume(ctx, *brokers, *topic, *limit, stdout)
	default:
		fmt.Fprintf(stderr, "offers: unknown command %q: want run, put or consume\n", args[0])
		return 2
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "offers %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// storeOptions say which store the example uses.
type storeOptions struct {
	demo, peers, certsDir, postgres, name string
}

// shards is the example store's number of shards.
const shards = 16

// openStore opens the store, and says how its changelog reaches Kafka:
// relay(ctx) runs until ctx ends.
func openStore(ctx context.Context, o storeOptions, brokers, topic string, log *slog.Logger) (scheduler.Store, func(context.Context) error, func(), error) {
	if o.postgres != "" {
		s, err := pgstore.Open(ctx, o.postgres, pgstore.Options{Schema: o.name, Shards: shards})
		if err != nil {
			return nil, nil, nil, err
		}
		if brokers == "" {
			return s, nil, func() { s.Close() }, nil
		}
		relay, err := pgstore.NewRelay(s, pgstore.RelayConfig{Brokers: strings.Split(brokers, ","), Topic: topic, Logger: log})
		if err != nil {
			s.Close()
			return nil, nil, nil, err
		}
		return s, relay.Run, func() { relay.Close(); s.Close() }, nil
	}
	if o.demo != "" {
		// shardkit demo writes its peers to DIR/peers, its certificates to DIR/certs.
		b, err := os.ReadFile(filepath.Join(o.demo, "peers"))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--demo: %w (is `shardkit demo --data-dir %s` running?)", err, o.demo)
		}
		o.peers = strings.TrimSpace(string(b))
		if _, err := os.Stat(filepath.Join(o.demo, "certs", "ca.crt")); err == nil {
			o.certsDir = filepath.Join(o.demo, "certs")
		}
	}
	peers, err := client.ParsePeers(o.peers)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--peer: %w", err)
	}
	var creds credentials.TransportCredentials
	if o.certsDir != "" {
		if creds, err = client.LoadCredentials(o.certsDir, "root"); err != nil {
			return nil, nil, nil, err
		}
	}
	c, err := client.New(ctx, client.Config{Peers: peers, Credentials: creds})
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := clusterstore.Open(ctx, c, clusterstore.Options{Prefix: o.name, Shards: shards})
	if err != nil {
		_ = c.Close()
		return nil, nil, nil, err
	}
	var relay func(context.Context) error
	if brokers != "" {
		cfg := s.Changelog()
		cfg.Brokers, cfg.Topic, cfg.Logger = strings.Split(brokers, ","), topic, log
		relay = func(ctx context.Context) error { return changefeed.Run(ctx, cfg) }
	}
	return s, relay, func() { _ = c.Close() }, nil
}

// runStages runs the stages on the store, and the changelog relay with
// brokers, until ctx ends.
func runStages(ctx context.Context, o storeOptions, brokers, topic string, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	store, relay, closeStore, err := openStore(ctx, o, brokers, topic, log)
	if err != nil {
		return err
	}
	defer closeStore()
	r, err := scheduler.NewRunner(scheduler.Config{Store: store, Stages: Stages(scheduler.SystemClock{}), Logger: log})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(gctx) })
	if relay != nil {
		g.Go(func() error { return relay(gctx) })
	}
	log.Info("offers: stages running", "store", o.name, "changelog", brokers != "")
	return g.Wait()
}

// put writes an offer from outside, whatever its version.
func put(ctx context.Context, o storeOptions, id, body string, stdout io.Writer) error {
	store, _, closeStore, err := openStore(ctx, o, "", "", nil)
	if err != nil {
		return err
	}
	defer closeStore()
	v, err := store.Put(ctx, id, []byte(body), scheduler.AnyVersion)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s is at version %d\n", id, v)
	return nil
}

// recordKey names a changelog record: a repeat (the relay sends at least
// once) has the same.
type recordKey struct {
	offer        string
	offerVersion int64
	stage        string
	stateVersion int64
}

// dedupe drops the records already seen. It remembers every key: a real
// consumer keeps, per offer, the highest versions applied instead.
type dedupe map[recordKey]bool

// fresh reports whether r is seen for the first time.
func (d dedupe) fresh(r scheduler.Record) bool {
	k := recordKey{r.OfferID, r.OfferVersion, r.Stage, r.StateVersion}
	if d[k] {
		return false
	}
	d[k] = true
	return true
}

// consume prints the changelog's records from the topic's start, each
// once.
func consume(ctx context.Context, brokers, topic string, limit int, stdout io.Writer) error {
	if brokers == "" {
		return errors.New("give --brokers")
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer kc.Close()
	seen := dedupe{}
	for n := 0; limit == 0 || n < limit; {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errs := fs.Errors(); len(errs) > 0 {
			return fmt.Errorf("topic %s partition %d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		for it := fs.RecordIter(); !it.Done() && (limit == 0 || n < limit); n++ {
			kr := it.Next()
			var r scheduler.Record
			if err := json.Unmarshal(kr.Value, &r); err != nil {
				return fmt.Errorf("partition %d offset %d: not a changelog record: %w", kr.Partition, kr.Offset, err)
			}
			if !seen.fresh(r) {
				continue
			}
			by := "outside"
			if r.Stage != "" {
				by = r.Stage
			}
			fmt.Fprintf(stdout, "%s v%d by %s: %s\n", r.OfferID, r.OfferVersion, by, r.Body)
		}
	}
	return nil
}
