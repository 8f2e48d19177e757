package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// result has the keys of `shardkit bench --format json`, plus "system".
type result struct {
	System    string  `json:"system"`
	Workload  string  `json:"workload"`
	Clients   int     `json:"clients"`
	Ops       int64   `json:"ops"`
	OpsPerS   float64 `json:"ops_per_s"`
	Errors    int64   `json:"errors"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	DurationS float64 `json:"duration_s"`
	// The watchers beside the load (--watchers): the events they
	// received, and each event's delay from its put's send time, in
	// whole milliseconds (as shardkit bench's).
	Watchers    int     `json:"watchers"`
	WatchEvents int64   `json:"watch_events"`
	WatchP50Ms  float64 `json:"watch_p50_ms"`
	WatchP99Ms  float64 `json:"watch_p99_ms"`
	WatchMaxMs  float64 `json:"watch_max_ms"`
}

func writeResult(w io.Writer, format string, r result) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(r) // one line
	}
	_, err := fmt.Fprintf(w, "system:     %s\nworkload:   %s\nclients:    %d\nops:        %d in %.2fs\nops/s:      %.0f\nerrors:     %d\nlatency:    p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms\n",
		r.System, r.Workload, r.Clients, r.Ops, r.DurationS, r.OpsPerS, r.Errors, r.P50Ms, r.P99Ms, r.P999Ms)
	if err == nil && r.Watchers > 0 {
		_, err = fmt.Fprintf(w, "watchers:   %d received %d events; delay p50 %.0f ms, p99 %.0f ms, max %.0f ms\n", r.Watchers, r.WatchEvents, r.WatchP50Ms, r.WatchP99Ms, r.WatchMaxMs)
	}
	return err
}

// progress prints the calls done so far once a second while the workers
// run, if stderr is a terminal. It returns the function that stops it.
func progress(stderr io.Writer, done *atomic.Int64, cfg config) (stop func()) {
	f, ok := stderr.(*os.File)
	if !ok || !isTerminal(f) {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start := time.Now()
		var last int64
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				n := done.Load()
				fmt.Fprintf(stderr, "etcd-bench: %s %d clients: %4.0fs  %d ops  %.0f/s\n",
					cfg.workload, cfg.clients, time.Since(start).Seconds(), n, float64(n-last))
				last = n
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
