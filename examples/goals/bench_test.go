package goals_test

// Benchmarks on real processes over loopback (docs/benchmarks.md, cache
// section). Run them one at a time, e.g.
//
//	go test -run '^$' -bench 'BenchmarkGet$' -benchtime 5000x ./examples/goals/

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/examples/goals"
	goalsv1 "github.com/shardkit/shardkit/examples/goals/v1"
)

const benchBatch = 30

func benchHits(i, counters, perCounter int) []*goalsv1.Hit {
	hits := make([]*goalsv1.Hit, benchBatch)
	for j := range hits {
		hits[j] = goals.DemoHit(i*benchBatch+j, counters, perCounter)
	}
	return hits
}

// BenchmarkUnaryVsClient: the cost of one cache-client Get against one
// plain generated-stub unary call, both to a single server holding the whole
// space, with the same 30 hits.
func BenchmarkUnaryVsClient(b *testing.B) {
	w := newWorld(b, backends[0], []string{"dc1"}, 1)
	p := w.start("dc1")
	w.waitServing(p)
	b.Run("plain-unary", func(b *testing.B) {
		conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		stub := goalsv1.NewGoalsMatcherServiceClient(conn)
		b.ResetTimer()
		defer reportClientCPU(b)()
		for i := range b.N {
			resp, err := stub.MatchSharded(b.Context(), &goalsv1.MatchShardedRequest{Hits: benchHits(i, w.counters, w.perCtr)})
			if err != nil || len(resp.GetReaches()) != benchBatch {
				b.Fatalf("MatchSharded: %v", err)
			}
		}
	})
	// Both calls in turn, so that the load of the (shared) machine weighs
	// on both alike: reports median latencies and their ratio.
	b.Run("interleaved", func(b *testing.B) {
		conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		stub := goalsv1.NewGoalsMatcherServiceClient(conn)
		c, err := cache.New(b.Context(), goals.Description(), cache.Options{Resolver: cache.StaticResolver(endpoints([]*proc{p})...)})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		plain, viaCache := hdrhistogram.New(1, 10_000_000, 3), hdrhistogram.New(1, 10_000_000, 3)
		b.ResetTimer()
		for i := range b.N {
			hits := benchHits(i, w.counters, w.perCtr)
			t0 := time.Now()
			if _, err := stub.MatchSharded(b.Context(), &goalsv1.MatchShardedRequest{Hits: hits}); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if _, err := c.Get(b.Context(), hits); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			_ = plain.RecordValue(max(t1.Sub(t0).Microseconds(), 1))    // bounded by the call
			_ = viaCache.RecordValue(max(t2.Sub(t1).Microseconds(), 1)) // bounded by the call
		}
		p50, c50 := float64(plain.ValueAtQuantile(50)), float64(viaCache.ValueAtQuantile(50))
		b.ReportMetric(p50, "unary-p50-us")
		b.ReportMetric(c50, "get-p50-us")
		b.ReportMetric(c50/p50, "ratio-p50")
		b.ReportMetric(float64(viaCache.ValueAtQuantile(99))/float64(plain.ValueAtQuantile(99)), "ratio-p99")
	})
	b.Run("cache-get", func(b *testing.B) {
		c, err := cache.New(b.Context(), goals.Description(), cache.Options{Resolver: cache.StaticResolver(endpoints([]*proc{p})...)})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ResetTimer()
		defer reportClientCPU(b)()
		for i := range b.N {
			got, err := c.Get(b.Context(), benchHits(i, w.counters, w.perCtr))
			if err != nil || len(got) != benchBatch {
				b.Fatalf("Get: %v", err)
			}
		}
	})
}

// reportClientCPU reports the CPU time of this (client) process per
// operation: the servers run in other processes, so this is the client's
// own cost.
func reportClientCPU(b *testing.B) func() {
	b.Helper()
	start := cpuTime(b)
	return func() {
		b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/float64(b.N), "client-cpu-us/op")
	}
}

func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGet: latency percentiles of sequential Gets of 30 hits over 2
// DCs x 3 shards, healthy, with one replica delayed 50 ms, and with one
// replica stopped (SIGSTOP); in send-to-all mode and with HedgeDelay.
// Also reports server requests per logical shard request.
func BenchmarkGet(b *testing.B) {
	modes := []struct {
		name  string
		hedge time.Duration
	}{{"send-to-all", 0}, {"hedge-2ms", 2 * time.Millisecond}}
	scenarios := []string{"healthy", "one-delayed-50ms", "one-sigstopped"}
	for _, mode := range modes {
		for _, sc := range scenarios {
			b.Run(mode.name+"/"+sc, func(b *testing.B) {
				benchGet(b, mode.hedge, sc)
			})
		}
	}
}

func benchGet(b *testing.B, hedge time.Duration, scenario string) {
	b.Helper()
	w := newWorld(b, backends[0], []string{"dc1", "dc2"}, 3)
	w.ttl, w.ping, w.margin = 10*time.Second, 2*time.Second, 2*time.Second
	var ps []*proc
	for i := range 6 {
		var extra []string
		if i == 0 && scenario == "one-delayed-50ms" {
			extra = []string{"--delay", "50ms"}
		}
		ps = append(ps, w.start([]string{"dc1", "dc2"}[i/3], extra...))
	}
	w.waitServing(ps...)
	reg := prometheus.NewRegistry()
	c, err := cache.New(b.Context(), goals.Description(), cache.Options{
		Resolver: cache.StaticResolver(endpoints(ps)...), HedgeDelay: hedge, Registerer: reg,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for i := range 200 { // warm-up: connections, latency estimates
		if _, err := c.Get(b.Context(), benchHits(i, w.counters, w.perCtr)); err != nil {
			b.Fatal(err)
		}
	}
	if scenario == "one-sigstopped" {
		ps[0].signal(b, syscall.SIGSTOP)
	}
	sent0, logical0 := goals.RequestCounts(reg)
	h := hdrhistogram.New(1, 60_000_000, 3)
	errs := 0
	b.ResetTimer()
	for i := range b.N {
		ctx, cancel := context.WithTimeout(b.Context(), 5*time.Second)
		t0 := time.Now()
		got, err := c.Get(ctx, benchHits(1000+i, w.counters, w.perCtr))
		lat := time.Since(t0)
		cancel()
		if err != nil || len(got) != benchBatch {
			errs++
		}
		_ = h.RecordValue(max(lat.Microseconds(), 1)) // bounded by the 5 s timeout
	}
	b.StopTimer()
	sent, logical := goals.RequestCounts(reg)
	ms := func(q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1000 }
	b.ReportMetric(ms(50), "p50-ms")
	b.ReportMetric(ms(99), "p99-ms")
	b.ReportMetric(ms(99.9), "p99.9-ms")
	b.ReportMetric(float64(errs), "errors")
	b.ReportMetric((sent-sent0)/max(logical-logical0, 1), "req/logical")
	if os.Getenv("SHARDKIT_BENCH_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "%s: %d gets, p50 %.3f p99 %.3f p99.9 %.3f max %.3f ms, errors %d\n",
			b.Name(), h.TotalCount(), ms(50), ms(99), ms(99.9), float64(h.Max())/1000, errs)
	}
}

// BenchmarkTakeover: time from kill -9 of a holder until a waiting server
// answers for its shard (TTL 2 s, ping 400 ms, margin 400 ms).
func BenchmarkTakeover(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			w := newWorld(b, be, []string{"dc1"}, 1)
			w.ttl, w.ping, w.margin = 2*time.Second, 400*time.Millisecond, 400*time.Millisecond
			holder := w.start("dc1")
			w.waitServing(holder)
			total := time.Duration(0)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				spare := w.start("dc1")
				prev := w.waitServing(holder)[holder]
				b.StartTimer()
				killed := time.Now()
				holder.signal(b, syscall.SIGKILL)
				poll(b, "takeover", func() bool {
					s, err := shardOf(b.Context(), spare.addr)
					return err == nil && s.Epoch == prev.Epoch+1
				})
				total += time.Since(killed)
				holder = spare
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "takeover-ms")
		})
	}
}
