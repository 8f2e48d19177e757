package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	schedulerv1 "github.com/shardkit/shardkit/api/scheduler/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/scheduler"
	"github.com/shardkit/shardkit/scheduler/clusterstore"
	"github.com/shardkit/shardkit/scheduler/grpcstage"
	"github.com/shardkit/shardkit/scheduler/pgstore"
)

const validSchedulerConfig = `
store: {postgres: "postgres://u@127.0.0.1:1/db", schema: s, shards: 16}
changelog: {brokers: ["127.0.0.1:9092"], topic: offers}
http_listen: 127.0.0.1:0
grpc_listen: 127.0.0.1:0
runner: {lease_ttl: 5s, max_chain: 8, poll_interval: 3s}
stages:
  - {id: validate, address: "127.0.0.1:7001", fields: [price], own_fields: [valid], max_attempts: 3, timeout: 2s}
  - {id: price, address: "[::1]:7002", after_save: true, rate_limit: 50.5, burst: 5}
`

// A scheduler's file is read whole or refused, naming the key that is
// wrong or missing.
func TestASchedulerConfigIsReadOrRefusedNamingTheKey(t *testing.T) {
	c, err := parseSchedulerConfig([]byte(validSchedulerConfig))
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Shards != 16 || c.Runner.LeaseTTL != 5*time.Second || c.Runner.PollInterval != 3*time.Second || len(c.Stages) != 2 || c.Stages[0].Timeout != 2*time.Second ||
		!c.Stages[1].AfterSave || c.Stages[1].RateLimit != 50.5 || c.Changelog.Topic != "offers" {
		t.Fatalf("read %+v", c)
	}
	for _, tt := range []struct{ name, file, want string }{
		{"empty", ``, "the file is empty"},
		{"an unknown key", validSchedulerConfig + "colour: red\n", "field colour not found"},
		{"no store", "stages: [{id: a, address: 'h:1'}]\n", "store: give store.shardkit.peers"},
		{"two stores", "store: {postgres: x, shardkit: {peers: ['h:1']}}\nstages: [{id: a, address: 'h:1'}]\n", "not both"},
		{"a schema for the cluster", "store: {shardkit: {peers: ['h:1']}, schema: s}\nstages: [{id: a, address: 'h:1'}]\n", "store.schema"},
		{"a bad peer", "store: {shardkit: {peers: ['h']}}\nstages: [{id: a, address: 'h:1'}]\n", "store.shardkit.peers"},
		{"no stages", "store: {postgres: x}\n", "stages: give at least one"},
		{"a listen address without a port", "store: {postgres: x}\ngrpc_listen: localhost\nstages: [{id: a, address: 'h:1'}]\n", `grpc_listen "localhost"`},
		{"half a changelog", "store: {postgres: x}\nchangelog: {topic: t}\nstages: [{id: a, address: 'h:1'}]\n", "changelog: give both"},
		{"a stage without an id", "store: {postgres: x}\nstages: [{address: 'h:1'}]\n", "stages[0].id"},
		{"a stage twice", "store: {postgres: x}\nstages: [{id: a, address: 'h:1'}, {id: a, address: 'h:2'}]\n", `stage "a" is given twice`},
		{"an address without a port", "store: {postgres: x}\nstages: [{id: a, address: h}]\n", `stage "a": address "h"`},
		{"a negative limit", "store: {postgres: x}\nstages: [{id: a, address: 'h:1', max_parallel: -1}]\n", `stage "a": rate_limit, burst`},
		{"a bad duration", "store: {postgres: x}\nstages: [{id: a, address: 'h:1', timeout: soon}]\n", "soon"},
		{"two documents", validSchedulerConfig + "---\nstore: {}\n", "more than one YAML document"},
	} {
		if _, err := parseSchedulerConfig([]byte(tt.file)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want a refusal with %q", tt.name, err, tt.want)
		}
	}
}

// Whatever a file holds, it is refused or read into a config whose every
// stage has a valid, unique id and a host:port.
func FuzzSchedulerConfig(f *testing.F) {
	f.Add([]byte(validSchedulerConfig))
	f.Add([]byte("store: {postgres: x}\nstages: [{id: a, address: 'h:1'}]\n"))
	f.Add([]byte("store: {shardkit: {peers: ['h:1'], prefix: p}}\nstages: [{id: a, address: 'h:1'}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseSchedulerConfig(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range c.Stages {
			if scheduler.ValidateID("stage", s.ID) != nil || seen[s.ID] {
				t.Fatalf("accepted stage id %q", s.ID)
			}
			seen[s.ID] = true
			if _, _, err := net.SplitHostPort(s.Address); err != nil {
				t.Fatalf("accepted address %q", s.Address)
			}
		}
	})
}

// validate marks an offer valid when it has a price; fail, asked about
// offers with a video, always fails.
type validate struct{}

func (validate) ShouldProcess(context.Context, scheduler.Offer, scheduler.State) (scheduler.Decision, error) {
	return scheduler.Now(), nil
}

func (validate) Process(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Result, error) {
	var b map[string]json.RawMessage
	if err := json.Unmarshal(o.Body, &b); err != nil {
		return scheduler.Result{}, err
	}
	_, ok := b["price"]
	return scheduler.Result{Patch: scheduler.Patch{"valid": json.RawMessage(fmt.Sprint(ok))}}, nil
}

type fail struct{}

// ShouldProcess asks for offers with a video only.
func (fail) ShouldProcess(_ context.Context, o scheduler.Offer, _ scheduler.State) (scheduler.Decision, error) {
	if !strings.Contains(string(o.Body), `"video"`) {
		return scheduler.Skip(), nil
	}
	return scheduler.Now(), nil
}

func (fail) Process(context.Context, scheduler.Offer, scheduler.State) (scheduler.Result, error) {
	return scheduler.Result{}, errors.New("the video cannot be fetched")
}

// `scheduler run` runs stages served by another program: an offer put in
// the store is validated by the external stage; an offer the other stage
// fails on lands in its dead letters, which `scheduler dead-letters`
// lists and `scheduler requeue` puts back; `scheduler status` shows the
// queues.
func TestSchedulerRunRunsExternalStages(t *testing.T) {
	t.Run("shardkit", func(t *testing.T) {
		addr := servertest.OneInstanceCluster(t)
		c, err := client.New(t.Context(), client.Config{Peers: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		store, err := clusterstore.Open(t.Context(), c, clusterstore.Options{Prefix: "cli", Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		runExternalStages(t, store, fmt.Sprintf("{shardkit: {peers: [%q], prefix: cli}, shards: 4}", addr), []string{"--peer", addr, "--prefix", "cli"})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := os.Getenv("SHARDKIT_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("SHARDKIT_TEST_POSTGRES_DSN is unset; run: eval \"$(bash scripts/services.sh env)\"")
		}
		schema := fmt.Sprintf("cli_scheduler_%d", time.Now().UnixNano()%1_000_000_000)
		t.Cleanup(func() {
			conn, err := pgx.Connect(context.Background(), dsn)
			if err == nil {
				_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
				_ = conn.Close(context.Background())
			}
		})
		store, err := pgstore.Open(t.Context(), dsn, pgstore.Options{Schema: schema, Shards: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		runExternalStages(t, store, fmt.Sprintf("{postgres: %q, schema: %s, shards: 4}", dsn, schema), []string{"--postgres", dsn, "--schema", schema})
	})
}

// runExternalStages is TestSchedulerRunRunsExternalStages on one store:
// fileStore is the file's store, common the commands' flags naming it.
func runExternalStages(t *testing.T, store scheduler.Store, fileStore string, common []string) {
	t.Helper()
	ctx := t.Context()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	schedulerv1.RegisterStageServiceServer(g, grpcstage.Server(map[string]scheduler.Stage{"validate": validate{}, "fetch-video": fail{}}))
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	// The offer API's port: taken, then let go for `scheduler run`.
	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := api.Addr().String()
	_ = api.Close()
	config := filepath.Join(t.TempDir(), "stages.yaml")
	file := fmt.Sprintf(`store: %s
grpc_listen: %s
runner: {lease_ttl: 2s}
stages:
  - {id: validate, address: %q, fields: [price], own_fields: [valid]}
  - {id: fetch-video, address: %q, fields: [video], max_attempts: 1}
`, fileStore, apiAddr, lis.Addr(), lis.Addr())
	if err := os.WriteFile(config, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	_, out, done := startShardkit(t, "scheduler", "run", "--config", config)
	// o1 is written through the offer API of `scheduler run`.
	conn, err := grpc.NewClient(apiAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pollFor(t, "the offer API to take o1", func() bool {
		_, err := schedulerv1.NewOfferServiceClient(conn).PutOffer(ctx, &schedulerv1.PutOfferRequest{Id: "o1", Body: []byte(`{"price": 10}`)})
		return err == nil
	})
	if _, err := store.Put(ctx, "o2", []byte(`{"video": "v.mp4"}`), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("scheduler run's output:\n%s", out)
		}
	})
	pollFor(t, "the external stage to validate o1 and fetch-video to give up on o2", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("scheduler run ended: %v\n%s", err, out)
		default:
		}
		o, _, err := store.Load(ctx, "o1", "")
		if err != nil || !strings.Contains(string(o.Body), `"valid":true`) {
			return false
		}
		dl, err := store.DeadLetters(ctx, "fetch-video", 10)
		return err == nil && len(dl) == 1
	})
	first, err := store.DeadLetters(ctx, "fetch-video", 10)
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, append([]string{"scheduler", "dead-letters", "fetch-video"}, common...)...)
	if code != 0 || !strings.Contains(stdout, "o2") || !strings.Contains(stdout, "the video cannot be fetched") {
		t.Fatalf("dead-letters: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = run(t, append([]string{"scheduler", "status", "--stages", "validate,fetch-video"}, common...)...)
	if code != 0 || !strings.Contains(stdout, "STAGE") || !strings.Contains(stdout, "validate") || !strings.Contains(stdout, "fetch-video") {
		t.Fatalf("status: exit %d\n%s%s", code, stdout, stderr)
	}
	stdout, stderr, code = run(t, append([]string{"scheduler", "requeue", "fetch-video", "o2"}, common...)...)
	if code != 0 || !strings.Contains(stdout, "requeued o2 in stage fetch-video") {
		t.Fatalf("requeue: exit %d\n%s%s", code, stdout, stderr)
	}
	// Requeued, it fails again and is back among the dead letters, later.
	pollFor(t, "o2 to fail again", func() bool {
		dl, err := store.DeadLetters(ctx, "fetch-video", 10)
		return err == nil && len(dl) == 1 && dl[0].At.After(first[0].At)
	})
	_, stderr, code = run(t, "scheduler", "status", "--stages", "validate", "--peer", "127.0.0.1:1", "--timeout", "2s")
	if code == 0 || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Fatalf("status of a cluster that is not there: exit %d, %s", code, stderr)
	}
}

// `scheduler tail` prints the changelog's records for people, one line
// each, names a record that is not one, and with --format json prints
// the values as they are.
func TestSchedulerTailPrintsTheChangelog(t *testing.T) {
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	brokers := strings.Join(k.ListenAddrs(), ",")
	p, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), kgo.DefaultProduceTopic("changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	at := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	var values [][]byte
	for _, r := range []scheduler.Record{
		{OfferID: "o1", OfferVersion: 1, Body: json.RawMessage(`{"price":10}`), Time: at},
		{OfferID: "o1", OfferVersion: 2, Body: json.RawMessage(`{"price":10,"valid":true}`), Stage: "validate", StateVersion: 1, Time: at},
	} {
		v, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	}
	values = append(values, []byte("not json"))
	for _, v := range values {
		if err := p.ProduceSync(t.Context(), &kgo.Record{Key: []byte("o1"), Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code := run(t, "scheduler", "tail", "--brokers", brokers, "--topic", "changelog", "--from-start", "--limit", "3")
	want := []string{
		`2026-11-28T03:00:00Z o1 v1 by outside: {"price":10}`,
		`2026-11-28T03:00:00Z o1 v2 by stage validate (state v1): {"price":10,"valid":true}`,
		`not a changelog record (scheduler.Record as JSON)`,
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("tail: exit %d\n%s%s", code, stdout, stderr)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %q, want %q", i+1, lines[i], w)
		}
	}
	stdout, _, code = run(t, "scheduler", "tail", "--brokers", brokers, "--topic", "changelog", "--from-start", "--limit", "1", "--format", "json")
	if code != 0 || strings.TrimSpace(stdout) != string(values[0]) {
		t.Fatalf("tail --format json: exit %d, %q, want %q", code, stdout, values[0])
	}
	if _, stderr, code := run(t, "scheduler", "tail", "--topic", "changelog"); code != 2 || !strings.Contains(stderr, "--brokers") {
		t.Fatalf("tail without brokers: exit %d, %s", code, stderr)
	}
}

// Whatever a changelog record holds, it is refused or a line that names
// its offer and version.
func FuzzChangelogLine(f *testing.F) {
	f.Add([]byte(`{"offer_id":"o1","offer_version":2,"body":{"a":1},"stage":"s","state_version":1,"time":"2026-11-28T03:00:00Z"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		line, err := changelogLine(v)
		if err != nil {
			return
		}
		var r scheduler.Record
		if json.Unmarshal(v, &r) != nil || r.OfferID == "" {
			t.Fatalf("accepted %q, which is no record with an offer", v)
		}
		if !strings.Contains(line, " "+r.OfferID+" v"+fmt.Sprint(r.OfferVersion)+" by ") {
			t.Fatalf("the line %q does not name offer %q version %d", line, r.OfferID, r.OfferVersion)
		}
	})
}

// The scheduler's benchmark, in each mode, on a few offers: every offer's
// last stage saved once and its record reached the changelog.
func TestSchedulerBenchProcessesEveryOfferOnce(t *testing.T) {
	t.Run("shardkit", func(t *testing.T) {
		addr := servertest.OneInstanceCluster(t)
		benchEveryMode(t, "--peer", addr)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := os.Getenv("SHARDKIT_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("SHARDKIT_TEST_POSTGRES_DSN is unset; run: eval \"$(bash scripts/services.sh env)\"")
		}
		benchEveryMode(t, "--postgres", dsn)
		if _, stderr, code := run(t, "scheduler", "bench", "--postgres", dsn, "--mode", "fast"); code != 2 || !strings.Contains(stderr, `--mode "fast"`) {
			t.Fatalf("bench --mode fast: exit %d, %s", code, stderr)
		}
	})
}

// benchEveryMode runs the bench on the store that store names.
func benchEveryMode(t *testing.T, store ...string) {
	t.Helper()
	for _, mode := range []string{"throughput", "pipeline", "timers"} {
		t.Run(mode, func(t *testing.T) {
			schema := "sched_bench_test_" + mode
			stdout, stderr, code := run(t, append([]string{"scheduler", "bench", "--schema", schema, "--mode", mode,
				"--offers", "300", "--shards", "8", "--writers", "4", "--due-per-s", "1000", "--lead", "1s", "--timeout", "2m"}, store...)...)
			if code != 0 {
				t.Fatalf("bench: exit %d\n%s%s", code, stdout, stderr)
			}
			var res benchResult
			if err := json.Unmarshal([]byte(stdout), &res); err != nil {
				t.Fatalf("bench printed %q: %v", stdout, err)
			}
			if res.Mode != mode || res.Jobs != 300 || res.Records != 300 || res.ProcessedOnce != 300 {
				t.Fatalf("bench: %s; want mode %s, 300 offers, 300 records, 300 saved once", stdout, mode)
			}
		})
	}
}
