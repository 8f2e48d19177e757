package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/pgstore"
	"github.com/shardkit/shardkit/scheduler/storetest"
)

// field returns a top-level field of o's body as JSON ("" when absent).
func field(o scheduler.Offer, f string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(o.Body, &m) != nil {
		return ""
	}
	return string(m[f])
}

// The example's stages on a shardkit cluster, the offers written through
// the example's own `put --demo DIR` (a demo's peers file).
func TestTheStagesOnShardkit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	addr := servertest.OneInstanceCluster(t)
	c, err := client.New(ctx, client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store, err := clusterstore.Open(ctx, c, clusterstore.Options{Prefix: "offers_test", Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "peers"), []byte(addr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	put := func(id, body string) {
		var out, errs strings.Builder
		if code := run(ctx, []string{"put", "--demo", dir, "--schema", "offers_test", id, body}, &out, &errs); code != 0 {
			t.Fatalf("offers put %s: exit %d: %s", id, code, errs.String())
		}
	}
	runStagesOn(ctx, t, store, put)
}

// The example's stages on PostgreSQL.
func TestTheStagesOnPostgreSQL(t *testing.T) {
	dsn := os.Getenv("SHARDKIT_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("SHARDKIT_TEST_POSTGRES_DSN is unset; run: eval \"$(bash scripts/services.sh env)\"")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	schema := fmt.Sprintf("offers_test_%d", time.Now().UnixNano()%1_000_000_000)
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), dsn); err == nil {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
			_ = conn.Close(context.Background())
		}
	})
	store, err := pgstore.Open(ctx, dsn, pgstore.Options{Schema: schema, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	runStagesOn(ctx, t, store, func(id, body string) {
		if _, err := store.Put(ctx, id, []byte(body), 0); err != nil {
			t.Fatal(err)
		}
	})
}

// runStagesOn: an offer with a price is validated and banded (the price
// stage keeps the price as its state); one without is rejected; 180 days
// after its publication, on the runner's clock, an offer is withdrawn,
// and not before. put writes an offer from outside.
func runStagesOn(ctx context.Context, t *testing.T, store scheduler.Store, put func(id, body string)) {
	t.Helper()
	published := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC)
	clock := storetest.NewFakeClock(published.Add(time.Hour))
	r, err := scheduler.NewRunner(scheduler.Config{Store: store, Stages: Stages(clock), Clock: clock,
		PollInterval: 20 * time.Millisecond, LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the runner ended with %v", err)
		}
	}()

	put("o1", fmt.Sprintf(`{"title":"bike","price":150,"published_at":%q}`, published.Format(time.RFC3339)))
	put("o2", `{"title":"no price yet"}`)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				o1, _, _ := store.Load(ctx, "o1", "")
				o2, _, _ := store.Load(ctx, "o2", "")
				t.Fatalf("waited 60 s for %s; o1 %s, o2 %s", what, o1.Body, o2.Body)
			}
		}
	}
	waitFor("o1 validated and banded, o2 rejected", func() bool {
		o1, st, err1 := store.Load(ctx, "o1", "price")
		o2, _, err2 := store.Load(ctx, "o2", "")
		last, ok := lastPrice(st)
		return err1 == nil && err2 == nil && field(o1, "valid") == "true" && field(o1, "price_band") == `"mid"` && ok && last == 150 &&
			field(o2, "valid") == "false" && field(o2, "reject_reason") == `"no price"`
	})
	clock.Advance(WithdrawAfter - 2*time.Hour) // an hour before it is due (the clock began an hour after publication)
	time.Sleep(200 * time.Millisecond)         // ten poll intervals, for a timer fired too early to show
	if o1, _, err := store.Load(ctx, "o1", ""); err != nil || field(o1, "withdrawn") != "" {
		t.Fatalf("o1 before its 180 days: %s (%v), want it not withdrawn", o1.Body, err)
	}
	clock.Advance(2 * time.Hour)
	waitFor("o1 withdrawn after 180 days", func() bool {
		o1, _, err := store.Load(ctx, "o1", "")
		return err == nil && field(o1, "withdrawn") == "true"
	})
}

// The consumer prints each changelog record once: a repeat (the relay
// sends at least once) is dropped by its offer, versions and stage.
func TestTheConsumerDropsRepeats(t *testing.T) {
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "offers-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	p, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.DefaultProduceTopic("offers-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs := []scheduler.Record{
		{OfferID: "o1", OfferVersion: 1, Body: json.RawMessage(`{"price":150}`)},
		{OfferID: "o1", OfferVersion: 2, Body: json.RawMessage(`{"price":150,"valid":true}`), Stage: "validate"},
		{OfferID: "o1", OfferVersion: 2, Body: json.RawMessage(`{"price":150,"valid":true}`), Stage: "validate"},
	}
	for _, r := range recs {
		v, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.ProduceSync(t.Context(), &kgo.Record{Key: []byte(r.OfferID), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"consume", "--brokers", strings.Join(k.ListenAddrs(), ","), "--limit", "3"}, &out, &errOut); code != 0 {
		t.Fatalf("consume: exit %d: %s", code, errOut.String())
	}
	want := "o1 v1 by outside: {\"price\":150}\no1 v2 by validate: {\"price\":150,\"valid\":true}\n"
	if out.String() != want {
		t.Fatalf("consume printed\n%s\nwant\n%s", out.String(), want)
	}
}
