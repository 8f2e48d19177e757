package cli

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// select's ranges and scan against a real one-instance cluster.
func TestSelectRangeAndScan(t *testing.T) {
	t.Parallel()
	addr := dataCluster(t)
	runCases(t, addr, []cliCase{
		{name: "create", args: []string{"space", "create", "q", "--field", "stage:string,due:unsigned,id:string", "--primary", "stage,due,id", "--sharding-key", "stage"}, out: "-"},
		{name: "a", args: []string{"insert", "q", `["s1",10,"a"]`}, out: "-"},
		{name: "b", args: []string{"insert", "q", `["s1",20,"b"]`}, out: "-"},
		{name: "c", args: []string{"insert", "q", `["s1",30,"c"]`}, out: "-"},
		{name: "x", args: []string{"insert", "q", `["s2",5,"x"]`}, out: "-"},
	})
	c, err := client.New(t.Context(), client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.Space("q").Bucket(t.Context(), tuple.String("s1"), tuple.Uint(0), tuple.String(""))
	if err != nil {
		t.Fatal(err)
	}
	bucket := func(args ...string) []string {
		return append([]string{"select", "q", "--bucket", strconv.FormatUint(uint64(b), 10)}, args...)
	}
	runCases(t, addr, []cliCase{
		{name: "prefix", args: bucket("--prefix", `["s1"]`), out: `[["s1",10,"a"],["s1",20,"b"],["s1",30,"c"]]` + "\n"},
		{name: "prefix until", args: bucket("--prefix", `["s1"]`, "--until", `["s1",25]`), out: `[["s1",10,"a"],["s1",20,"b"]]` + "\n"},
		{name: "after partial", args: bucket("--after", `["s1",10]`, "--versions"), out: "-"},
		{name: "from reverse", args: bucket("--from", `["s1",20]`, "--reverse", "--mode", "ro"), out: `[["s1",30,"c"],["s1",20,"b"]]` + "\n"},
		{name: "empty", args: bucket("--prefix", `["s9"]`), out: "[]\n"},
		{name: "bound of the wrong type", args: bucket("--until", `["s1","x"]`), code: 2, err: []string{"range of q", "--until", "due"}},
		{name: "too many parts", args: bucket("--prefix", `["s1",1,"a",4]`), code: 2, err: []string{"--prefix", "4 parts", "1 to 3"}},
		{name: "no parts", args: bucket("--from", `[]`), code: 2, err: []string{"--from", "0 parts"}},
		{name: "from and after", args: bucket("--from", `["s1"]`, "--after", `["s1"]`), code: 2, err: []string{"--from", "--after", "not both"}},
		{name: "no bucket", args: []string{"select", "q", "--prefix", `["s1"]`}, code: 2, err: []string{"KEY (a point read) or --bucket B (a range)"}},
		{name: "key and a range flag", args: []string{"select", "q", `["s1",10,"a"]`, "--bucket", "1"}, code: 2, err: []string{"--bucket is for a range"}},
		{name: "point select still", args: []string{"select", "q", `["s1",10,"a"]`}, out: `[["s1",10,"a"]]` + "\n"},
		{name: "scan", args: []string{"scan", "q", "--format", "jsonl", "--page-size", "1"}, out: "-"},
		{name: "scan bad format", args: []string{"scan", "q", "--format", "csv"}, code: 2, err: []string{`invalid --format "csv"`}},
		{name: "scan bad cursor", args: []string{"scan", "q", "--cursor", "zz"}, code: 2, err: []string{"scan of q", "not one a scan returned"}},
		{name: "scan no space", args: []string{"scan", "nope"}, code: 1, err: []string{`no space "nope"`}},
	})
	// A range that stops at its limit says how to read on.
	code, out, errOut := runMainIn(t, "", append(bucket("--prefix", `["s1"]`, "--reverse", "--limit", "2"), "--peer", addr)...)
	if code != 0 || out != `[["s1",30,"c"],["s1",20,"b"]]`+"\n" || errOut != `more tuples follow; read on with --until '["s1",20,"b"]'`+"\n" {
		t.Fatalf("a range at its limit: exit %d, %q, %q", code, out, errOut)
	}
	// A scan stopped by --limit prints its cursor; resumed, it reads the rest.
	code, out, errOut = runMainIn(t, "", "scan", "q", "--limit", "3", "--page-size", "2", "--peer", addr)
	m := regexp.MustCompile(`^stopped at --limit 3; resume with --cursor (\S+)\n$`).FindStringSubmatch(errOut)
	if code != 0 || m == nil || strings.Count(out, `["s`) != 3 {
		t.Fatalf("scan --limit 3: exit %d, %q, %q", code, out, errOut)
	}
	first := out
	code, out, errOut = runMainIn(t, "", "scan", "q", "--cursor", m[1], "--format", "jsonl", "--progress", "--peer", addr)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "scan: 1 tuples in") {
		t.Fatalf("scan --cursor: exit %d, %q, %q", code, out, errOut)
	}
	rows := regexp.MustCompile(`\["s[^\]]*\]`).FindAllString(first+out, -1)
	sort.Strings(rows)
	if got := strings.Join(rows, " "); got != `["s1",10,"a"] ["s1",20,"b"] ["s1",30,"c"] ["s2",5,"x"]` {
		t.Fatalf("a scan and its resumption read %s", got)
	}
}

// watch prints the events of a space from a cursor, and the cursor to
// resume from; a bad cursor or format is a usage error.
func TestWatchPrintsEventsAndTheCursorToResume(t *testing.T) {
	t.Parallel()
	addr := dataCluster(t)
	runCases(t, addr, []cliCase{
		{name: "create", args: []string{"space", "create", "wq", "--field", "k:string,v:unsigned", "--primary", "k"}, out: "-"},
		{name: "a", args: []string{"insert", "wq", `["a",1]`}, out: "-"},
		{name: "a again", args: []string{"replace", "wq", `["a",2]`}, out: "-"},
		{name: "a gone", args: []string{"delete", "wq", `["a"]`}, out: "-"},
		{name: "bad cursor", args: []string{"watch", "wq", "--from", "nope"}, code: 2, err: []string{"watch of wq", "--from", `does not start with "c1."`}},
		{name: "bad format", args: []string{"watch", "wq", "--format", "csv"}, code: 2, err: []string{`invalid --format "csv"`}},
		{name: "scan and cursor", args: []string{"watch", "wq", "--initial-scan", "--from", "c1.AA"}, code: 2, err: []string{"--initial-scan", "--from", "one or the other"}},
	})
	c, err := client.New(t.Context(), client.Config{Peers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := c.Space("wq").Bucket(t.Context(), tuple.String("a"))
	if err != nil {
		t.Fatal(err)
	}
	from := client.NewCursor(map[uint32]uint64{b: 0}).String()
	code, out, errOut := runMainIn(t, "", "watch", "wq", "--from", from, "--limit", "3", "--peer", addr)
	want := fmt.Sprintf(`{"bucket":%d,"revision":1,"time":"*","changes":[{"space":"wq","kind":"insert","key":["a"],"tuple":["a",1],"version":*}]}
{"bucket":%d,"revision":2,"time":"*","changes":[{"space":"wq","kind":"replace","key":["a"],"tuple":["a",2],"version":*}]}
{"bucket":%d,"revision":3,"time":"*","changes":[{"space":"wq","kind":"delete","key":["a"],"version":*}]}
`, b, b, b)
	if code != 0 || !matchStars(want, out) {
		t.Fatalf("watch: exit %d\n%s\nwant\n%s\nstderr %s", code, out, want, errOut)
	}
	m := regexp.MustCompile(`3 events; resume with: --from (\S+)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("watch's stderr %q names no cursor", errOut)
	}
	cur, err := client.ParseCursor(m[1])
	if r, ok := cur.Revision(b); err != nil || !ok || r != 3 {
		t.Fatalf("the printed cursor %s: bucket %d at %d (%v, %v), want 3", m[1], b, r, ok, err)
	}
	runCases(t, addr, []cliCase{{name: "b", args: []string{"insert", "wq", `["b",5]`}, out: "-"}})
	code, out, errOut = runMainIn(t, "", "watch", "wq", "--initial-scan", "--limit", "1", "--peer", addr)
	if code != 0 || !matchStars(`{"bucket":*,"revision":0,"time":"*","changes":[{"space":"wq","kind":"scan","key":["b"],"tuple":["b",5],"version":*}]}`+"\n", out) {
		t.Fatalf("watch --initial-scan: exit %d, %q, %s", code, out, errOut)
	}
}

// matchStars reports whether s is pattern with each * standing for any
// run of characters without a quote or a newline.
func matchStars(pattern, s string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, `[^"\n]*`) + "$"
	return regexp.MustCompile(re).MatchString(s)
}
