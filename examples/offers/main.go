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
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/shardkit/shardkit/scheduler"
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
	dsn := fs.String("postgres", os.Getenv("SHARDKIT_TEST_POSTGRES_DSN"), "PostgreSQL connection string (default $SHARDKIT_TEST_POSTGRES_DSN)")
	schema := fs.String("schema", "offers_example", "the store's schema")
	brokers := fs.String("brokers", "", "Kafka's seed brokers, comma-separated (run: the changelog relay; consume)")
	topic := fs.String("topic", "offers-changelog", "the changelog's topic")
	limit := fs.Int("limit", 0, "consume: stop after this many records, repeats included (0: never)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runStages(ctx, *dsn, *schema, *brokers, *topic, stderr)
	case "put":
		if fs.NArg() != 2 {
			fmt.Fprintln(stderr, "usage: offers put ID JSON [--postgres DSN]")
			return 2
		}
		err = put(ctx, *dsn, *schema, fs.Arg(0), fs.Arg(1), stdout)
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

// runStages runs the stages on the store, and the changelog relay with
// brokers, until ctx ends.
func runStages(ctx context.Context, dsn, schema, brokers, topic string, stderr io.Writer) error {
	store, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Shards: 16})
	if err != nil {
		return err
	}
	defer store.Close()
	log := slog.New(slog.NewTextHandler(stderr, nil))
	r, err := scheduler.NewRunner(scheduler.Config{Store: store, Stages: Stages(scheduler.SystemClock{}), Logger: log})
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.Run(gctx) })
	if brokers != "" {
		relay, err := pgstore.NewRelay(store, pgstore.RelayConfig{Brokers: strings.Split(brokers, ","), Topic: topic, Logger: log})
		if err != nil {
			return err
		}
		defer relay.Close()
		g.Go(func() error { return relay.Run(gctx) })
	}
	log.Info("offers: stages running", "schema", schema, "changelog", brokers != "")
	return g.Wait()
}

// put writes an offer from outside, whatever its version.
func put(ctx context.Context, dsn, schema, id, body string, stdout io.Writer) error {
	store, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Shards: 16})
	if err != nil {
		return err
	}
	defer store.Close()
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
