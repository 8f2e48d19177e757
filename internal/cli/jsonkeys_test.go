package cli

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/bench"
	"github.com/shardkit/shardkit/internal/statusview"
	"github.com/shardkit/shardkit/tuple"
)

// Every JSON output of the commands (and of /api/v1/cluster, which writes
// the status View) prints every documented key, zero or not, and no key the
// docs do not list. Each output is made with zero values (0, false, "",
// a message not set), so a key dropped for being zero (omitempty) fails.
func TestJSONOutputsPrintTheirDocumentedKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		doc       []string // the documented keys
		out       func(*bytes.Buffer) error
		dataMaps  []string // keys whose objects hold data, not fields
		whereDocs string
	}{
		{
			name: "status --format json, /api/v1/cluster",
			doc:  docJSONKeys(t, "operations.md", "`--format json` is for scripts", "failure_domain"),
			out: func(b *bytes.Buffer) error {
				return writeStatusJSON(b, statusview.View{Instances: []statusview.Instance{{}}, Replicasets: []statusview.Replicaset{{}}})
			},
			dataMaps: []string{"failure_domain"}, whereDocs: "docs/operations.md",
		},
		{
			name: "rebalance status --format json",
			doc:  docJSONKeys(t, "data.md", "`--format json` prints the same as one JSON object"),
			out: func(b *bytes.Buffer) error {
				return writeProtoJSONLine(b, &datav1.RebalanceStatusResponse{
					Replicasets: []*datav1.ReplicasetBalance{{}}, Moves: []*datav1.MoveInfo{{}}})
			},
			whereDocs: "docs/data.md, Growing and shrinking",
		},
		{
			name: "reshard STEP --format json",
			doc:  docJSONKeys(t, "data.md", "With `--format json` each step prints"),
			out: func(b *bytes.Buffer) error {
				return writeProtoJSONLine(b, &datav1.ReshardResponse{Moves: []*datav1.MoveInfo{{}}, Counts: []*datav1.SpaceCount{{}}})
			},
			whereDocs: "docs/data.md, The seed's procedure",
		},
		{
			name: "space list --format json",
			doc:  docJSONKeys(t, "data.md", "**`space list`**"),
			out: func(b *bytes.Buffer) error {
				return writeSpacesJSON(b, []client.SpaceDef{{Format: tuple.Format{{Type: tuple.TypeUnsigned}}}})
			},
			whereDocs: "docs/data.md, The commands",
		},
		{
			name:      "select --read-info",
			doc:       docJSONKeys(t, "data.md", "how stale it may be (`select --read-info`"),
			out:       func(b *bytes.Buffer) error { return writeReadInfo(b, client.ReadInfo{}) },
			whereDocs: "docs/data.md, Consistency",
		},
		{
			name:      "insert --if-absent",
			doc:       docJSONKeys(t, "data.md", "**`insert --if-absent`**"),
			out:       func(b *bytes.Buffer) error { return writeInserted(b, client.Result{}) },
			whereDocs: "docs/data.md, The commands",
		},
		{
			name:      "batch",
			doc:       docJSONKeys(t, "data.md", "`shardkit batch` prints one JSON array"),
			out:       func(b *bytes.Buffer) error { return writeBatchResults(b, []batchOp{{}}, []client.Result{{}}) },
			whereDocs: "docs/data.md, Compare ops",
		},
		{
			name:      "bench --format json",
			doc:       docTableKeys(t, "benchmarks.md", "| `--format json` |"),
			out:       func(b *bytes.Buffer) error { return writeBenchResult(b, "json", bench.Result{}) },
			whereDocs: "docs/benchmarks.md",
		},
	} {
		var b bytes.Buffer
		if err := c.out(&b); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var v any
		if err := json.Unmarshal(b.Bytes(), &v); err != nil {
			t.Errorf("%s: %v: %s", c.name, err, b.Bytes())
			continue
		}
		got := keyPaths(v, c.dataMaps)
		for _, k := range c.doc {
			if !slices.Contains(got, k) {
				t.Errorf("%s: documented key %s is not printed: %s", c.name, k, b.Bytes())
			}
		}
		for _, k := range got {
			if !slices.Contains(c.doc, k) {
				t.Errorf("%s: key %s is printed but not documented (%s)", c.name, k, c.whereDocs)
			}
		}
	}
}

// rebalance status --format json, end to end: a replicaset of weight 0
// that holds a pinned bucket and has no quorum shows weight 0, available
// false, and its infinite disbalance; the settings not sent show as zero.
func TestRebalanceStatusJSONPrintsZeroFields(t *testing.T) {
	t.Parallel()
	addr := (&fakeSharding{resp: &datav1.RebalanceStatusResponse{
		BucketCount:          3000,
		Replicasets:          []*datav1.ReplicasetBalance{{ReplicasetId: "r2", Buckets: 1, Target: 0, Pinned: 1, DisbalancePercent: math.Inf(1)}},
		MaxDisbalancePercent: math.Inf(1),
		BucketsToMove:        1,
	}}).serve(t)
	code, out, errOut := runMain(t, "rebalance", "status", "--peer", addr, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `{"bucket_count":3000,"replicasets":[{"replicaset_id":"r2","weight":0,"locked":false,"buckets":1,"target":0,` +
		`"disbalance_percent":"Infinity","pinned":1,"sending":0,"receiving":0,"available":false,"pinned_buckets":[],"drain_waits":""}],"moves":[],` +
		`"settings":{"disabled":false,"threshold_percent":0,"max_sending":0,"max_receiving":0,"copy_bytes_per_s":0,"paused_by_reshard":false,"copy_pace_off":false},` +
		`"max_disbalance_percent":"Infinity","buckets_to_move":1,"stale":false,"stale_reason":""}` + "\n"
	if out != want {
		t.Errorf("rebalance status --format json:\n got %s\nwant %s", out, want)
	}
}

// writeProtoJSONLine writes numbers as numbers (64-bit ones too), strings
// without escaping HTML, and finite doubles as encoding/json does.
func TestWriteProtoJSONLine(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	err := writeProtoJSONLine(&b, &datav1.ReshardResponse{
		Moves:   []*datav1.MoveInfo{{Bucket: 1, Generation: math.MaxUint64, AgeMs: -1, Phase: "<copy>"}},
		Summary: "a & b",
	})
	want := `{"moves":[{"bucket":1,"from":"","to":"","generation":18446744073709551615,"phase":"<copy>","age_ms":-1,"reason":"","operator":false}],` +
		`"counts":[],"summary":"a & b"}` + "\n"
	if err != nil || b.String() != want {
		t.Errorf("writeProtoJSONLine = %s, %v; want %s", b.String(), err, want)
	}
	b.Reset()
	err = writeProtoJSONLine(&b, &datav1.RebalancerSettings{ThresholdPercent: 1e-7, CopyBytesPerS: 4096})
	want = `{"disabled":false,"threshold_percent":1e-7,"max_sending":0,"max_receiving":0,"copy_bytes_per_s":4096,"paused_by_reshard":false,"copy_pace_off":false}` + "\n"
	if err != nil || b.String() != want {
		t.Errorf("writeProtoJSONLine = %s, %v; want %s", b.String(), err, want)
	}
}

// keyPaths lists the keys of a JSON value as paths ("moves[].bucket"),
// sorted; the objects under dataMaps keys are data, their keys not listed.
func keyPaths(v any, dataMaps []string) []string {
	seen := map[string]bool{}
	var walk func(v any, prefix string)
	walk = func(v any, prefix string) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				seen[p] = true
				if !slices.Contains(dataMaps, k) {
					walk(e, p)
				}
			}
		case []any:
			for _, e := range v {
				walk(e, prefix+"[]")
			}
		}
	}
	walk(v, "")
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// docJSONKeys returns the key paths of the first ```json block after the
// first line of docs/file that contains marker.
func docJSONKeys(t *testing.T, file, marker string, dataMaps ...string) []string {
	t.Helper()
	text := readDoc(t, file)
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("docs/%s has no %q", file, marker)
	}
	rest := text[i:]
	start := strings.Index(rest, "```json\n")
	if start < 0 {
		t.Fatalf("docs/%s has no ```json block after %q", file, marker)
	}
	rest = rest[start+len("```json\n"):]
	end := strings.Index(rest, "```")
	if end < 0 {
		t.Fatalf("docs/%s: the ```json block after %q does not end", file, marker)
	}
	var v any
	if err := json.Unmarshal([]byte(rest[:end]), &v); err != nil {
		t.Fatalf("docs/%s: the ```json block after %q: %v", file, marker, err)
	}
	return keyPaths(v, dataMaps)
}

// docTableKeys returns the `names` of the last cell of the table row of
// docs/file that starts with row.
func docTableKeys(t *testing.T, file, row string) []string {
	t.Helper()
	for line := range strings.Lines(readDoc(t, file)) {
		if !strings.HasPrefix(line, row) {
			continue
		}
		cells := strings.Split(strings.TrimSpace(line), "|")
		var keys []string
		for _, m := range regexp.MustCompile("`([a-z0-9_]+)`").FindAllStringSubmatch(cells[len(cells)-2], -1) {
			keys = append(keys, m[1])
		}
		slices.Sort(keys)
		return keys
	}
	t.Fatalf("docs/%s has no row %q", file, row)
	return nil
}

func readDoc(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
