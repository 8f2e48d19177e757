package bench_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/bench"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

func config(addr, workload string) bench.Config {
	return bench.Config{
		Peers: []string{addr}, Workload: workload, Space: "b",
		Keys: 300, Clients: 8, Conns: 3, ValueSize: 20, Timeout: 30 * time.Second, Preload: true,
	}
}

func count(t *testing.T, addr, space string) uint64 {
	t.Helper()
	c, err := client.New(t.Context(), client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := c.Count(t.Context(), space)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The counts of every workload add up against a one-instance cluster:
// insert loads exactly its key range, and the reads find every row.
func TestWorkloadsCountsAddUp(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	cfg := config(addr, bench.Insert)
	cfg.Count = 300
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 300 || res.Errors != 0 || res.Writes != 300 || res.Reads != 0 || res.FirstError != "" {
		t.Fatalf("insert: %+v, want 300 ops, 300 writes, no error", res)
	}
	if n := count(t, addr, "b"); n != 300 {
		t.Fatalf("after inserting keys 0..299 the space holds %d rows", n)
	}
	if res.System != "shardkit" || res.Workload != "insert" || res.Clients != 8 || res.Conns != 3 || res.DurationS <= 0 ||
		res.OpsPerS <= 0 || res.P50Ms <= 0 || res.P99Ms < res.P50Ms || res.P999Ms < res.P99Ms {
		t.Fatalf("insert: %+v", res)
	}

	// A second walk of the same range finds every key taken.
	cfg.Count = 10
	res, err = bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 0 || res.Errors != 10 || !strings.Contains(res.FirstError, "duplicate key") {
		t.Fatalf("insert again: %+v, want 10 duplicate-key errors", res)
	}

	for _, wl := range []string{bench.Replace, bench.Get, bench.Mixed} {
		cfg := config(addr, wl)
		cfg.Count = 200
		if wl == bench.Replace {
			cfg.Rate = 400 // paced: the same count, made on a schedule
		}
		cfg.Keys = 400 // 100 more than inserted: get and mixed preload them
		cfg.Settle = time.Millisecond
		res, err := bench.Run(ctx, cfg)
		if err != nil {
			t.Fatalf("%s: %v", wl, err)
		}
		if res.Ops != 200 || res.Errors != 0 || res.Reads+res.Writes != 200 {
			t.Fatalf("%s: %+v, want 200 ops, no error", wl, res)
		}
		switch wl {
		case bench.Replace:
			if res.Writes != 200 || res.PreloadRows != 0 || res.Rate != 400 {
				t.Fatalf("replace: %+v", res)
			}
			// 8 clients, 25 calls each, 20 ms apart on their schedules:
			// the last starts 480 ms in at the earliest, however fast the
			// cluster (a lower bound pacing sets, not a timing; unpaced,
			// these 200 calls take a few tens of ms).
			if res.DurationS < 0.48 {
				t.Fatalf("replace paced at 400/s: 200 calls in %.3fs; the schedule was not kept", res.DurationS)
			}
		case bench.Get:
			if res.Reads != 200 || res.PreloadRows != 400 {
				t.Fatalf("get: %+v, want 200 reads after a preload of 400 rows", res)
			}
		case bench.Mixed:
			if res.Reads == 0 || res.Writes == 0 {
				t.Fatalf("mixed: %+v, want reads and writes", res)
			}
		}
	}
	if n := count(t, addr, "b"); n != 400 {
		t.Fatalf("after the preload of keys 0..399 the space holds %d rows", n)
	}

	// A scan reads rows: 1000 of them is two passes and a half of the 400,
	// in pages of 50 (8 a pass and a page of the next, per client), shared
	// by the clients.
	cfg = config(addr, bench.Scan)
	cfg.Keys, cfg.Count, cfg.PageSize, cfg.Clients, cfg.Settle = 400, 1000, 50, 2, time.Millisecond
	res, err = bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 1000 || res.Reads != 1000 || res.Writes != 0 || res.Errors != 0 || res.PageSize != 50 || res.OpsPerS <= 0 || res.P50Ms <= 0 {
		t.Fatalf("scan: %+v, want 1000 rows read in pages of 50, no error", res)
	}
	// A range workload's operations are calls, its reads the rows they
	// read: 300 ranges of random buckets (of 3000) find some of the 400.
	cfg = config(addr, bench.Range)
	cfg.Keys, cfg.Count, cfg.PageSize, cfg.Settle = 400, 300, 100, time.Millisecond
	res, err = bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 300 || res.Errors != 0 || res.Reads == 0 || res.Reads > 400 || res.Writes != 0 || res.PageSize != 100 {
		t.Fatalf("range: %+v, want 300 calls reading some of the 400 rows, no error", res)
	}
}

// A duration run stops by itself; a get without a preload counts the
// missing rows as errors; progress lines are written while it runs.
func TestDurationProgressAndMissingRows(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	var progress bytes.Buffer
	cfg := config(addr, bench.Replace)
	cfg.Space = "" // the default space, made by the bench
	cfg.Keys = 50
	cfg.Duration = time.Second
	cfg.Progress, cfg.ProgressEvery = &progress, 50*time.Millisecond
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops == 0 || res.Errors != 0 || res.Space != bench.DefaultSpace {
		t.Fatalf("replace for a duration: %+v", res)
	}
	if !strings.Contains(progress.String(), "bench: replace 8 clients:") {
		t.Fatalf("no progress line: %q", progress.String())
	}

	cfg = config(addr, bench.Get)
	cfg.Space = "empty"
	cfg.Preload = false
	cfg.Count = 20
	res, err = bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ops != 0 || res.Errors != 20 || !strings.Contains(res.FirstError, "no row") {
		t.Fatalf("get without preload from an empty space: %+v", res)
	}
}

// A space of another definition is refused, naming what the bench needs.
func TestSpaceOfAnotherDefinition(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	c, err := client.New(t.Context(), client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.CreateSpace(t.Context(), client.SpaceDef{Name: "other",
		Format:     tuple.Format{{Name: "key", Type: tuple.TypeString}, {Name: "value", Type: tuple.TypeBytes}},
		PrimaryKey: []string{"key"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config(addr, bench.Replace)
	cfg.Space = "other"
	cfg.Count = 1
	_, err = bench.Run(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), "another definition") || !errors.Is(err, client.ErrAlreadyExists) {
		t.Fatalf("bench on a space of another definition: %v", err)
	}
}

func TestConfigCheck(t *testing.T) {
	t.Parallel()
	ok := bench.Config{Peers: []string{"127.0.0.1:1"}, Workload: bench.Insert, Keys: 10, Count: 10, Clients: 1, Conns: 1, Timeout: time.Second}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*bench.Config){
		"no peers":         func(c *bench.Config) { c.Peers = nil },
		"bad workload":     func(c *bench.Config) { c.Workload = "put" },
		"no keys":          func(c *bench.Config) { c.Keys = 0 },
		"insert past keys": func(c *bench.Config) { c.Count = 11 },
		"neither":          func(c *bench.Config) { c.Count = 0 },
		"no clients":       func(c *bench.Config) { c.Clients = 0 },
		"no conns":         func(c *bench.Config) { c.Conns = 0 },
		"no timeout":       func(c *bench.Config) { c.Timeout = 0 },
		"negative value":   func(c *bench.Config) { c.ValueSize = -1 },
		"negative rate":    func(c *bench.Config) { c.Rate = -1 },
		"rate too high":    func(c *bench.Config) { c.Rate = 1e9 },
		"paced scan":       func(c *bench.Config) { c.Workload, c.Rate = bench.Scan, 10 },
		"page too large":   func(c *bench.Config) { c.PageSize = 10001 },
	} {
		c := ok
		mut(&c)
		if err := c.Check(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
