package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The write-stall counters are served from the start, at 0 for every reason
// Pebble gives, before any stall; a stall then adds to its reason's series.
func TestWriteStallCountersAreServedBeforeAnyStall(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := newStorageMetrics(reg)
	names := []string{"shardkit_storage_write_stalls_total", "shardkit_storage_write_stall_seconds_total"}

	got := gatherCounters(t, reg, names)
	for _, name := range names {
		if len(got[name]) != len(writeStallReasons) {
			t.Errorf("%s before any stall: %v, want one series per reason %q", name, got[name], writeStallReasons)
		}
		for _, r := range writeStallReasons {
			v, ok := got[name][r]
			if !ok {
				t.Errorf("%s{reason=%q} missing before any stall (got %v)", name, r, got[name])
			} else if v != 0 {
				t.Errorf("%s{reason=%q} = %v before any stall, want 0", name, r, v)
			}
		}
	}

	m.writeStall("L0 file count limit exceeded", 1500*time.Millisecond)
	got = gatherCounters(t, reg, names)
	want := map[string]map[string]float64{
		names[0]: {"memtable count limit reached": 0, "L0 file count limit exceeded": 1},
		names[1]: {"memtable count limit reached": 0, "L0 file count limit exceeded": 1.5},
	}
	for _, name := range names {
		for r, w := range want[name] {
			if v := got[name][r]; v != w {
				t.Errorf("%s{reason=%q} = %v after one stall, want %v", name, r, v, w)
			}
		}
	}
}

// gatherCounters scrapes reg: the value of each counter of names, by its
// reason label.
func gatherCounters(t *testing.T, reg *prometheus.Registry, names []string) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, name := range names {
		out[name] = map[string]float64{}
	}
	for _, mf := range mfs {
		series, ok := out[mf.GetName()]
		if !ok {
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER {
			t.Fatalf("%s is a %v, want a counter", mf.GetName(), mf.GetType())
		}
		for _, mt := range mf.GetMetric() {
			var reason string
			for _, l := range mt.GetLabel() {
				if l.GetName() == "reason" {
					reason = l.GetValue()
				}
			}
			series[reason] = mt.GetCounter().GetValue()
		}
	}
	return out
}
