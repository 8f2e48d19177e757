package grpcnet_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/shardkit/shardkit/internal/multiraft/kvsm"
)

// BenchmarkProposals3Nodes measures proposals through a 3-member group on
// real loopback gRPC with real Pebble databases on disk (fsync on), with 1,
// 64 and 256 concurrent proposers of 100-byte commands. It reports
// proposals/s, p50/p99 latency and process CPU time per proposal (all three
// members run in this process, so that is the cost of the whole group).
//
//	go test -run '^$' -bench BenchmarkProposals3Nodes -benchtime 20000x ./internal/multiraft/grpcnet/
//
// Two state machine commands: sm=put reads the key's old value before
// writing (the put of kvsm, which returns it), sm=set writes blindly, so
// that the engine's own cost shows without the state machine's read.
func BenchmarkProposals3Nodes(b *testing.B) {
	for _, op := range []struct {
		name string
		op   kvsm.Op
	}{{"put", kvsm.OpPut}, {"set", kvsm.OpSet}} {
		for _, conc := range []int{1, 64, 256} {
			b.Run(fmt.Sprintf("sm=%s/proposers=%d", op.name, conc), func(b *testing.B) {
				benchProposals(b, conc, op.op)
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

func benchProposals(b *testing.B, conc int, op kvsm.Op) {
	b.Helper()
	c := newGRPCCluster(b, 3, nil)
	lead := c.leader()
	g := c.nodes[lead].group
	value := make([]byte, 100-1-1-8) // a 100-byte command: op, key length, 8-byte key, value
	for i := range value {
		value[i] = 'v'
	}
	cmd := func(i int64) []byte {
		return kvsm.Command{Op: op, Key: fmt.Appendf(nil, "%08d", i%100000), Value: value}.Encode()
	}
	if len(cmd(0)) != 100 {
		b.Fatalf("command is %d bytes", len(cmd(0)))
	}
	// Warm up: connections, caches.
	for i := range 200 {
		if _, err := g.Propose(context.Background(), cmd(int64(i))); err != nil {
			b.Fatal(err)
		}
	}
	hist := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	var mu sync.Mutex
	var next atomic.Int64
	var failed atomic.Int64
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			local := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					break
				}
				start := time.Now()
				if _, err := g.Propose(context.Background(), cmd(i)); err != nil {
					failed.Add(1)
					continue
				}
				_ = local.RecordValue(time.Since(start).Microseconds())
			}
			mu.Lock()
			hist.Merge(local)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d proposals failed", n)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "proposals/s")
	b.ReportMetric(float64(hist.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(hist.ValueAtQuantile(99)), "p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/proposal")
}
