package server

import (
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The sampler reads the data calls' rates and p99 from the registry's
// latency histogram, between two samples.
func TestMetricSamples(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	rpc := newRPCMetrics(reg)
	m := newMetricSampler(reg)
	t0 := time.Unix(1_700_000_000, 0)
	m.sample(t0)
	for range 98 {
		rpc.call("/shardkit.data.v1.DataService/Write", 0, 50*time.Microsecond) // the first bucket (0.1 ms)
	}
	rpc.call("/shardkit.data.v1.DataService/Get", 0, 3*time.Millisecond)   // 0.1*4^3 = 6.4 ms
	rpc.call("/shardkit.data.v1.DataService/Range", 0, 3*time.Millisecond) // likewise
	rpc.call("/shardkit.cluster.v1.ClusterService/GetStatus", 0, time.Second)
	m.sample(t0.Add(2 * time.Second))
	v := m.view("i1")
	if len(v.Samples) != 1 {
		t.Fatalf("samples %+v", v.Samples)
	}
	s := v.Samples[0]
	if s.WritesPerSec != 49 || s.ReadsPerSec != 1 || math.Abs(s.P99Ms-6.4) > 1e-9 || s.Time != t0.Add(2*time.Second).UnixMilli() {
		t.Errorf("sample %+v; want 49 writes/s, 1 read/s, p99 6.4 ms", s)
	}
	m.sample(t0.Add(4 * time.Second))
	if s := m.view("i1").Samples[1]; s.WritesPerSec != 0 || s.ReadsPerSec != 0 || s.P99Ms != 0 {
		t.Errorf("an idle interval: %+v", s)
	}
}

// FuzzPageParams: any query of a range or scan page is refused with
// InvalidArgument or read into a limit of 1 to 1000; nothing panics.
func FuzzPageParams(f *testing.F) {
	for _, q := range []string{"limit=10&after=AAEC", "limit=0", "limit=1001", "after=***", "limit=-1&after=", "bucket=3&limit=1e3"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		r := httptest.NewRequest("GET", "/api/v1/spaces/kv/scan", nil)
		r.URL.RawQuery = q
		limit, _, err := pageParams(r)
		if err == nil && (limit < 1 || limit > 1000) {
			t.Fatalf("%q: limit %d accepted", q, limit)
		}
		if _, err := parseMode(r); err != nil && r.URL.Query().Get("mode") == "" {
			t.Fatalf("%q: no mode refused: %v", q, err)
		}
		if b, err := parseBucket(r.URL.Query().Get("bucket"), 3000); err == nil && (b < 1 || b > 3000) {
			t.Fatalf("%q: bucket %d accepted", q, b)
		}
	})
}
