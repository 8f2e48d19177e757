package server_test

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/bench"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

// BenchmarkData3Instances measures the data layer end to end in one
// process: three instances (replication factor 3, one replicaset; each
// with its own Pebble database on disk and its own gRPC server on
// loopback) and the load generator of `shardkit bench` (internal/bench:
// the public client, 16 connections), for a write (replace) and a
// linearizable read (get) of 100-byte values over 64,000 keys, with 4, 64 and
// 256 concurrent clients. It reports ops/s, p50/p99 and the process's CPU
// per operation (the three instances and the client together). It is the
// data layer's counterpart of grpcnet's BenchmarkProposals3Nodes, and
// the place to take profiles from without separate processes:
//
//	go test -run '^$' -bench 'BenchmarkData3Instances/replace/clients=256' -benchtime 20000x -cpuprofile cpu.out ./internal/server/
func BenchmarkData3Instances(b *testing.B) {
	peers := threeInstances(b)
	const keys = 64_000
	base := bench.Config{Peers: peers, Space: "bench", Keys: keys, Conns: bench.DefaultConns,
		ValueSize: bench.DefaultValueSize, Timeout: 30 * time.Second}
	// The rows the reads read, once, before the first read benchmark (the
	// sub-benchmarks run several times; a profile of the writes alone
	// does not include the load).
	loaded := false
	for _, wl := range []string{bench.Replace, bench.Get} {
		for _, clients := range []int{4, 64, 256} {
			b.Run(fmt.Sprintf("%s/clients=%d", wl, clients), func(b *testing.B) {
				if wl == bench.Get && !loaded {
					pre := base
					pre.Workload, pre.Clients, pre.Count, pre.Preload = bench.Get, 64, 1, true
					if _, err := bench.Run(b.Context(), pre); err != nil {
						b.Fatal(err)
					}
					loaded = true
				}
				cfg := base
				cfg.Workload, cfg.Clients, cfg.Count = wl, clients, int64(b.N)
				b.ResetTimer()
				cpu0 := cpuTime()
				res, err := bench.Run(b.Context(), cfg)
				cpu := cpuTime() - cpu0
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if res.Errors > 0 {
					b.Fatalf("%d calls failed; first: %s", res.Errors, res.FirstError)
				}
				b.ReportMetric(res.OpsPerS, "ops/s")
				b.ReportMetric(res.P50Ms*1000, "p50-µs")
				b.ReportMetric(res.P99Ms*1000, "p99-µs")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threeInstances starts three instances with replication factor 3 and
// returns their addresses once all three are Online voters of one
// replicaset.
func threeInstances(tb testing.TB) []string {
	tb.Helper()
	var addrs []string
	var liss []net.Listener
	for range 3 {
		l, a := servertest.Listen(tb)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	for i := range addrs {
		servertest.Run(tb, server.InstanceConfig{
			Listener: liss[i], Peers: addrs, InitReplicationFactor: 3,
			AutoOfflineTimeout: 30 * time.Second, ShutdownTimeout: 5 * time.Second,
		})
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, err := getStatus(addrs[0])
		if err == nil && len(st.GetInstances()) == 3 && len(st.GetReplicasets()) == 1 {
			online := 0
			for _, is := range st.GetInstances() {
				if is.GetInstance().GetCurrentGrade().GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE {
					online++
				}
			}
			if online == 3 {
				return addrs
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("not 3 instances Online in one replicaset after 90s: %v (%v)", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
