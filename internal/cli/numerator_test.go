package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/numerator"
	"github.com/shardkit/shardkit/numerator/synth"
)

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(args, nil, &out, &errOut)
	return out.String(), errOut.String(), code
}

func writeGeneration(t *testing.T, path string, g int64) {
	t.Helper()
	if _, err := synth.Write(t.Context(), path, synth.Params{Offers: 3000, Churn: 0.1, Flap: 0.05}, g); err != nil {
		t.Fatal(err)
	}
}

// TestNumeratorRunsThroughTheLocalCoordinator: two runs take their input
// state from the coordinator; a run on bad input fails, reports failure and
// leaves the recorded state untouched.
func TestNumeratorRunsThroughTheLocalCoordinator(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	coord := filepath.Join(dir, "coord")
	for g := range 2 {
		writeGeneration(t, filepath.Join(dir, fmt.Sprintf("offers-%d.parquet", g)), int64(g))
	}
	common := []string{"numerator", "run", "--coordinator", "local", "--coordinator-addr", coord, "--master-name", "dc-a", "--ttl", "1"}
	out, stderr, code := run(t, append(common, "--input-offers", filepath.Join(dir, "offers-0.parquet"), "--output-state", filepath.Join(dir, "s0"))...)
	if code != 0 {
		t.Fatalf("run 0: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "version 0.0.0.0 run 1") || !strings.Contains(out, "ticket 1") {
		t.Fatalf("run 0 output: %s", out)
	}
	// Run 1 names no input state: the coordinator's is used, copied to the working location.
	work := filepath.Join(dir, "work-state")
	out, stderr, code = run(t, append(common, "--input-state", work, "--input-offers", filepath.Join(dir, "offers-1.parquet"),
		"--output-state", filepath.Join(dir, "s1"), "--intermediate-new-docs", filepath.Join(dir, "new1"))...)
	if code != 0 {
		t.Fatalf("run 1: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "version 0.0.0.1 run 2") {
		t.Fatalf("run 1 output: %s", out)
	}
	if _, err := os.Stat(filepath.Join(work, "part-00000.parquet")); err != nil {
		t.Fatalf("the coordinator's state was not copied to --input-state: %v", err)
	}
	// A truncated offers table: the run fails and the recorded state stays.
	bad := filepath.Join(dir, "bad.parquet")
	data, err := os.ReadFile(filepath.Join(dir, "offers-1.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, data[:len(data)/3], 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code = run(t, append(common, "--input-offers", bad, "--output-state", filepath.Join(dir, "s2"))...)
	if code == 0 || !strings.Contains(stderr, "bad.parquet") {
		t.Fatalf("bad input: exit %d, stderr %q", code, stderr)
	}
	out, stderr, code = run(t, "numerator", "status", "--coordinator", "local", "--coordinator-addr", coord)
	if code != 0 {
		t.Fatalf("status: %s", stderr)
	}
	if !strings.Contains(out, filepath.Join(dir, "s1")+`"`) || !strings.Contains(out, "lock free") {
		t.Fatalf("status after the failed run: %s", out)
	}
	out, stderr, code = run(t, "numerator", "inspect", filepath.Join(dir, "s1"))
	if code != 0 || !strings.Contains(out, "version 0.0.0.1") || !strings.Contains(out, "hole_ratio") {
		t.Fatalf("inspect: exit %d out %s err %s", code, out, stderr)
	}
	in, err := numerator.Inspect(t.Context(), filepath.Join(dir, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	var docs int64
	for _, s := range in.Shards {
		docs += s.Docs
	}
	if !strings.Contains(out, fmt.Sprintf("total %d", docs)) && !strings.Contains(strings.Join(strings.Fields(out), " "), fmt.Sprintf("total %d", docs)) {
		t.Fatalf("inspect total: %s (want %d docs)", out, docs)
	}
}

// TestNumeratorQuietPrintsOnlyTheVersion: with --quiet, stdout is the
// version line alone, with a coordinator or without.
func TestNumeratorQuietPrintsOnlyTheVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	offers := filepath.Join(dir, "offers.parquet")
	writeGeneration(t, offers, 0)
	for i, coord := range [][]string{{"--coordinator", "local", "--coordinator-addr", filepath.Join(dir, "coord")}, {"--coordinator", "none"}} {
		args := append([]string{"numerator", "run", "--quiet", "--input-offers", offers, "--output-state", filepath.Join(dir, fmt.Sprint("s", i))}, coord...)
		out, stderr, code := run(t, args...)
		if code != 0 || out != "version 0.0.0.0 run 1\n" {
			t.Errorf("run %v: exit %d, stdout %q (want only the version line), stderr %s", coord, code, out, stderr)
		}
	}
}

// TestNumeratorRefusesAnEmptyGeneration: a valid offers table without
// rows is refused (the recorded state stays, the lock is released) unless
// --allow-empty; so is one that lacks most of the previous generation,
// unless --allow-drop-fraction allows it.
func TestNumeratorRefusesAnEmptyGeneration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	full, empty, part := filepath.Join(dir, "full.parquet"), filepath.Join(dir, "empty.parquet"), filepath.Join(dir, "part.parquet")
	writeGeneration(t, full, 0)
	w, err := numerator.NewOfferWriter(empty)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := synth.Write(t.Context(), part, synth.Params{Offers: 1000}, 0); err != nil {
		t.Fatal(err)
	}
	coord := filepath.Join(dir, "coord")
	common := []string{"numerator", "run", "--coordinator", "local", "--coordinator-addr", coord, "--ttl", "3"}
	if _, stderr, code := run(t, append(common, "--input-offers", full, "--output-state", filepath.Join(dir, "s0"))...); code != 0 {
		t.Fatalf("the first run: %s", stderr)
	}
	tests := []struct {
		name, offers string
		extra        []string
		words        string
	}{
		{"empty", empty, nil, "--allow-empty"},
		{"a third of the offers", part, nil, "--allow-drop-fraction"},
		{"empty, the drop allowed", empty, []string{"--allow-drop-fraction", "1"}, "--allow-empty"},
		{"a third of the offers, a smaller share allowed", part, []string{"--allow-drop-fraction", "0.6"}, "--allow-drop-fraction 0.667"},
	}
	for i, tt := range tests {
		args := append(append(common, "--input-offers", tt.offers, "--output-state", filepath.Join(dir, fmt.Sprint("refused", i))), tt.extra...)
		_, stderr, code := run(t, args...)
		if code == 0 || !strings.Contains(stderr, tt.words) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal naming %s", tt.name, code, stderr, tt.words)
		}
	}
	out, stderr, code := run(t, "numerator", "status", "--coordinator", "local", "--coordinator-addr", coord)
	if code != 0 || !strings.Contains(out, filepath.Join(dir, "s0")+`"`) || !strings.Contains(out, "lock free") {
		t.Fatalf("status after the refusals: %s %s", out, stderr)
	}
	if _, stderr, code := run(t, append(common, "--input-offers", empty, "--output-state", filepath.Join(dir, "s1"), "--allow-empty")...); code != 0 {
		t.Fatalf("an empty generation with --allow-empty: %s", stderr)
	}
	if _, stderr, code := run(t, append(common, "--input-offers", part, "--output-state", filepath.Join(dir, "s2"), "--allow-drop-fraction", "1")...); code != 0 {
		t.Fatalf("a third of the offers with --allow-drop-fraction 1: %s", stderr)
	}
}

// TestNumeratorProgress: --progress prints every phase's progress on
// stderr although it is not a terminal; without it, nothing.
func TestNumeratorProgress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	offers := filepath.Join(dir, "offers.parquet")
	writeGeneration(t, offers, 0)
	args := []string{"numerator", "run", "--coordinator", "none", "--input-offers", offers}
	// The first run has no state to plan against: it loads and writes.
	// The second plans too; its state is streamed, not loaded.
	for i, phases := range [][]string{{"load", "write"}, {"load", "plan", "write"}} {
		extra := []string{"--output-state", filepath.Join(dir, fmt.Sprint("s", i)), "--progress"}
		if i > 0 {
			extra = append(extra, "--input-state", filepath.Join(dir, "s0"))
		}
		out, stderr, code := run(t, append(args, extra...)...)
		if code != 0 {
			t.Fatalf("run %d --progress: exit %d: %s", i, code, stderr)
		}
		for _, phase := range phases {
			rows := 3000 * (1 + i) // the second run's plan and write read the state too
			if phase == "load" {
				rows = 3000
			}
			if !strings.Contains(stderr, "numerator: "+phase+" 0/") || !strings.Contains(stderr, fmt.Sprintf("numerator: %s done: %d rows in ", phase, rows)) {
				t.Errorf("run %d --progress: stderr does not show the %s phase from 0 to its %d rows:\n%s", i, phase, rows, stderr)
			}
		}
		if !strings.Contains(stderr, "rows/s") || strings.Contains(out, "numerator: load") {
			t.Errorf("run %d --progress: stdout %q, stderr %q; want the rate, on stderr only", i, out, stderr)
		}
	}
	if _, stderr, code := run(t, append(args, "--output-state", filepath.Join(dir, "s2"))...); code != 0 || stderr != "" {
		t.Errorf("run without --progress, stderr not a terminal: exit %d, stderr %q; want nothing", code, stderr)
	}
}

// TestNumeratorGenAndDump: gen writes a synthetic input that run takes;
// dump prints a table's rows; a corrupt file is refused, naming it.
func TestNumeratorGenAndDump(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	offers := filepath.Join(dir, "offers.parquet")
	out, stderr, code := run(t, "numerator", "gen", "--offers", "500", "--generation", "1", "--flap", "0.1", offers)
	if code != 0 || !strings.Contains(out, "to "+offers) {
		t.Fatalf("gen: exit %d: %s %s", code, out, stderr)
	}
	if _, stderr, code := run(t, "numerator", "gen", "--offers", "5", offers); code == 0 || !strings.Contains(stderr, "choose a new location") {
		t.Fatalf("gen over an existing file: exit %d, stderr %s", code, stderr)
	}
	state := filepath.Join(dir, "state")
	if _, stderr, code := run(t, "numerator", "run", "--coordinator", "none", "--input-offers", offers, "--output-state", state); code != 0 {
		t.Fatalf("run on the generated offers: %s", stderr)
	}
	out, stderr, code = run(t, "numerator", "dump", "--limit", "3", state)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.Contains(lines[0], `"doc_id":`) || !strings.Contains(lines[0], `"offer_id":"sku-`) {
		t.Fatalf("dump --limit 3: exit %d\n%s\n%s", code, out, stderr)
	}
	out, _, code = run(t, "numerator", "dump", "--format", "table", offers)
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) < 400 || len(lines) > 501 || !strings.HasPrefix(lines[0], "business_id") {
		t.Fatalf("dump --format table: exit %d, %d lines, header %q", code, len(lines), lines[0])
	}
	corrupt := filepath.Join(dir, "corrupt.parquet")
	data, err := os.ReadFile(offers)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(corrupt, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := run(t, "numerator", "dump", corrupt); code == 0 || !strings.Contains(stderr, corrupt) || !strings.Contains(stderr, "bad input") {
		t.Fatalf("dump of a corrupt file: exit %d, stderr %s", code, stderr)
	}
}

func TestNumeratorRefusesUnavailableAndBadFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	offers := filepath.Join(dir, "o.parquet")
	writeGeneration(t, offers, 0)
	tests := []struct {
		name  string
		args  []string
		words string
	}{
		{"shardkit coordinator without an address", []string{"--coordinator", "shardkit", "--coordinator-addr", ""}, "shardkit address"},
		{"unknown coordinator", []string{"--coordinator", "etcd"}, "want local, zookeeper"},
		{"unknown scheme", []string{"--coordinator", "none", "--output-sharding-scheme", "999"}, "unknown scheme"},
		{"bad memory limit", []string{"--coordinator", "none", "--memory-limit", "lots"}, "--memory-limit"},
		{"tiny memory limit", []string{"--coordinator", "none", "--memory-limit", "1MiB"}, "workable minimum of 192 MiB"},
		{"a memory limit below the minimum", []string{"--coordinator", "none", "--memory-limit", "64MiB"}, "give at least 192MiB"},
	}
	for i, tt := range tests {
		args := append([]string{"numerator", "run", "--input-offers", offers, "--output-state", filepath.Join(dir, fmt.Sprint("s", i))}, tt.args...)
		_, stderr, code := run(t, args...)
		if code == 0 || !strings.Contains(stderr, tt.words) {
			t.Errorf("%s: exit %d, stderr %q; want a refusal saying %q", tt.name, code, stderr, tt.words)
		}
	}
}

func TestNumeratorBenchInProcess(t *testing.T) {
	t.Parallel()
	out, stderr, code := run(t, "numerator", "bench", "--in-process", "--offers", "2000", "--generations", "3", "--dir", filepath.Join(t.TempDir(), "b"))
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "0.0.0.0") || !strings.Contains(out, "0.0.0.2") || !strings.Contains(out, "peak_rss_MiB") {
		t.Fatalf("bench output: %s", out)
	}
}

func TestParseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1GiB", 1 << 30, true}, {"512MiB", 512 << 20, true}, {"2G", 2 << 30, true}, {"1.5GiB", 3 << 29, true},
		{"1000", 1000, true}, {"10MB", 10e6, true}, {"0", 0, true}, {" 4 KiB ", 4096, true},
		{"", 0, false}, {"-1GiB", 0, false}, {"GiB", 0, false}, {"1PiB", 0, false}, {"NaN", 0, false}, {"1e30", 0, false},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("parseSize(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"1GiB", "0.5M", "12", "-3", "1e3KB", "inf", "+Inf GiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && n < 0 {
			t.Fatalf("parseSize(%q) = %d", s, n)
		}
	})
}
