package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/server/servertest"
)

// `shardkit bench --format json` prints one JSON object with the keys
// scripts/bench-vs-etcd.sh reads; the counts add up.
func TestBenchJSON(t *testing.T) {
	addr := servertest.OneInstanceCluster(t)
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	code, out, errOut := runMain(t, "bench", "--peer", addr, "--workload", "insert", "--keys", "120", "--count", "120",
		"--clients", "6", "--conns", "2", "--format", "json", "--cpuprofile", prof)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Fatalf("want one line of JSON, got %q", out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	for _, k := range []string{"workload", "clients", "ops", "ops_per_s", "errors", "p50_ms", "p99_ms", "p999_ms", "duration_s", "system"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no key %q in %s", k, out)
		}
	}
	if got["system"] != "shardkit" || got["workload"] != "insert" || got["ops"] != 120.0 || got["errors"] != 0.0 || got["clients"] != 6.0 {
		t.Fatalf("result %s", out)
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Fatalf("--cpuprofile wrote nothing: %v", err)
	}

	// Text, with progress forced on a stderr that is not a terminal.
	code, out, errOut = runMain(t, "bench", "--peer", addr, "--workload", "get", "--keys", "120", "--duration", "3s",
		"--clients", "4", "--settle", "0s", "--progress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"system:     shardkit", "workload:   get (space bench, 120 keys", "errors:     0", "preload:    120 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	for _, want := range []string{"bench: preloaded 120 rows", "bench: get 4 clients:"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("no %q on stderr:\n%s", want, errOut)
		}
	}
}

func TestBenchFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--count", "5", "--duration", "1s"}, "--count or --duration"},
		{[]string{"--format", "yaml"}, "--format"},
		{[]string{"--workload", "put"}, "workload \"put\""},
		{[]string{"--workload", "insert", "--keys", "5", "--count", "6"}, "raise the keys"},
		{[]string{"--peer", "nohost"}, "--peer"},
	} {
		code, _, errOut := runMain(t, append([]string{"bench"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want an error naming %q", tc.args, code, errOut, tc.want)
		}
	}
}
