package cli

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/internal/server/servertest"
)

// The data commands against a real one-instance cluster in this process.

// dataCluster starts a one-instance cluster and waits until it stores
// tuples (its buckets are bootstrapped); it returns its address.
func dataCluster(t *testing.T) string {
	t.Helper()
	addr := servertest.OneInstanceCluster(t)
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, _, errOut := runMain(t, "space", "create", "ready", "--peer", addr, "--field", "k:unsigned", "--primary", "k", "--if-not-exists")
		if code == 0 {
			code, _, errOut = runMain(t, "replace", "--peer", addr, "ready", "[1]")
		}
		if code == 0 {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster at %s stores no tuple after 90s: %s", addr, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func runMainIn(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// cliCase is one command line and what it must give: the exit code, the
// exact stdout (when out is not "-"), and parts of the one line on stderr.
type cliCase struct {
	name  string
	args  []string
	stdin string
	code  int
	out   string
	err   []string
}

func (c cliCase) check(t *testing.T, addr string) string {
	t.Helper()
	args := append(append([]string{}, c.args...), "--peer", addr)
	code, out, errOut := runMainIn(t, c.stdin, args...)
	if code != c.code {
		t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), code, c.code, out, errOut)
	}
	if c.out != "-" && out != c.out {
		t.Errorf("%s: stdout %q, want %q", strings.Join(c.args, " "), out, c.out)
	}
	if c.code == 0 {
		if errOut != "" {
			t.Errorf("%s: stderr %q, want nothing", strings.Join(c.args, " "), errOut)
		}
		return out
	}
	if strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "shardkit: ") {
		t.Errorf("%s: stderr %q is not one line", strings.Join(c.args, " "), errOut)
	}
	for _, want := range c.err {
		if !strings.Contains(errOut, want) {
			t.Errorf("%s: stderr %q lacks %q", strings.Join(c.args, " "), errOut, want)
		}
	}
	return out
}

func runCases(t *testing.T, addr string, cases []cliCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, addr) })
	}
}

// versionOf reads the version of the one tuple --versions printed.
func versionOf(t *testing.T, out string) uint64 {
	t.Helper()
	var got []struct {
		Tuple   json.RawMessage `json:"tuple"`
		Version uint64          `json:"version"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || got[0].Version == 0 {
		t.Fatalf("--versions printed %q (%v); want one tuple with a version", out, err)
	}
	return got[0].Version
}

func TestDataCommands(t *testing.T) {
	t.Parallel()
	addr := dataCluster(t)
	offers := []string{"space", "create", "offers", "--field", "shop:unsigned", "--field", "offer:string,price:double?",
		"--primary", "shop,offer", "--sharding-key", "shop"}

	t.Run("space", func(t *testing.T) {
		runCases(t, addr, []cliCase{
			{name: "create", args: offers, out: "-"},
			{name: "create again", args: offers, code: 1, err: []string{`create space offers`, `space "offers" already exists`}},
			{name: "create if not exists", args: append(offers, "--if-not-exists"), out: "-"},
			{name: "if not exists, another definition", args: []string{"space", "create", "offers", "--field", "shop:unsigned", "--primary", "shop", "--if-not-exists"},
				code: 1, err: []string{`space "offers" already exists`}},
			{name: "unknown type", args: []string{"space", "create", "x", "--field", "price:float", "--primary", "price"},
				code: 2, err: []string{"--field", `"price:float"`, `unknown type "float"`}},
			{name: "no fields", args: []string{"space", "create", "x", "--primary", "id"}, code: 2, err: []string{"--field is required"}},
			{name: "no primary key", args: []string{"space", "create", "x", "--field", "id:unsigned"}, code: 2, err: []string{"--primary is required"}},
			{name: "primary key not a field", args: []string{"space", "create", "x", "--field", "id:unsigned", "--primary", "nope"},
				code: 2, err: []string{"--primary", `no field "nope"`, "the fields are id"}},
			{name: "nullable primary key", args: []string{"space", "create", "x", "--field", "id:unsigned?", "--primary", "id"},
				code: 2, err: []string{"--primary", "id is nullable"}},
			{name: "sharding key outside the primary key", args: []string{"space", "create", "x", "--field", "a:unsigned,b:string", "--primary", "a", "--sharding-key", "b"},
				code: 2, err: []string{"--sharding-key: field b is not in --primary a"}},
			{name: "duplicate field", args: []string{"space", "create", "x", "--field", "a:unsigned,a:string", "--primary", "a"},
				code: 2, err: []string{"--field", "field 2 (a)", "already field 1's"}},
			{name: "bad space name", args: []string{"space", "create", "bad-name", "--field", "a:unsigned", "--primary", "a"},
				code: 2, err: []string{"create space bad-name", `invalid space name "bad-name"`}},
			{name: "create without a name", args: []string{"space", "create", "--field", "a:unsigned", "--primary", "a"},
				code: 2, err: []string{"shardkit: space create takes one argument, NAME; got 0"}},
			{name: "unknown flag", args: []string{"space", "create", "x", "--fields", "a:unsigned"}, code: 2, err: []string{"unknown flag: --fields"}},
			{name: "list bad format", args: []string{"space", "list", "--format", "yaml"}, code: 2, err: []string{`invalid --format "yaml"`}},
			{name: "drop missing", args: []string{"space", "drop", "nope"}, code: 1, err: []string{"drop space nope", `no space "nope"`}},
			{name: "count missing", args: []string{"space", "count", "nope"}, code: 1, err: []string{`no space "nope"`, "shardkit space list"}},
			{name: "count empty", args: []string{"space", "count", "offers"}, out: "0\n"},
		})
		code, out, errOut := runMain(t, "space", "list", "--peer", addr)
		if code != 0 || !strings.Contains(out, "NAME") || !regexpLine(out, `offers +\d+ +shop:unsigned,offer:string,price:double\? +shop,offer +shop`) {
			t.Errorf("space list: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, out, errOut = runMain(t, "space", "list", "--peer", addr, "--format", "json")
		var list []spaceJSON
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("space list --format json: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		var found bool
		for _, s := range list {
			if s.Name != "offers" {
				continue
			}
			found = true
			want := `{"name":"offers","id":` + strconv.Itoa(int(s.ID)) + `,"fields":[{"name":"shop","type":"unsigned","nullable":false},` +
				`{"name":"offer","type":"string","nullable":false},{"name":"price","type":"double","nullable":true}],` +
				`"primary_key":["shop","offer"],"sharding_key":["shop"],"schema_version":` + strconv.FormatUint(s.SchemaVersion, 10) + `}`
			if b, _ := json.Marshal(s); string(b) != want || s.ID == 0 {
				t.Errorf("space list --format json: offers is %s, want %s", b, want)
			}
		}
		if !found {
			t.Errorf("space list --format json lacks offers: %s", out)
		}
	})

	t.Run("crud", func(t *testing.T) {
		runCases(t, addr, []cliCase{
			{name: "insert", args: []string{"insert", "offers", `[1, "a", 10]`}, out: "[[1,\"a\",10.0]]\n"},
			{name: "insert duplicate", args: []string{"insert", "offers", `[1, "a", 11]`}, code: 1,
				err: []string{"insert into offers", `duplicate key [1,"a"] in space offers`}},
			{name: "insert wrong type", args: []string{"insert", "offers", `[1, "b", "x"]`}, code: 2,
				err: []string{"insert into offers: the tuple", `element 3 (price): expected double, got string "x"`}},
			{name: "insert negative unsigned", args: []string{"insert", "offers", `[-1, "b"]`}, code: 2,
				err: []string{`element 1 (shop): expected unsigned, got number -1`}},
			{name: "insert missing field", args: []string{"insert", "offers", `[1]`}, code: 2,
				err: []string{"field 2 (offer): missing", "shop:unsigned, offer:string, price:double?"}},
			{name: "insert bad JSON", args: []string{"insert", "offers", `[1, "b"`}, code: 2, err: []string{"the tuple is not valid JSON"}},
			{name: "insert not an array", args: []string{"insert", "offers", `{"shop": 1}`}, code: 2, err: []string{"must be a JSON array, got an object"}},
			{name: "insert into a missing space", args: []string{"insert", "nope", `[1]`}, code: 1, err: []string{`no space "nope"`}},
			{name: "insert from stdin", args: []string{"insert", "offers", "-"}, stdin: `[1, "b", null]`, out: "[[1,\"b\",null]]\n"},
			{name: "insert without a price", args: []string{"insert", "offers", `[2, "c"]`}, out: "[[2,\"c\"]]\n"},
			{name: "two args from stdin", args: []string{"update", "offers", "-", "-"}, code: 2, err: []string{"only one argument can be read from stdin"}},
			{name: "too few args", args: []string{"insert", "offers"}, code: 2, err: []string{"shardkit: insert takes 2 arguments, SPACE TUPLE; got 1"}},

			{name: "select", args: []string{"select", "offers", `[1, "a"]`}, out: "[[1,\"a\",10.0]]\n"},
			{name: "select missing", args: []string{"select", "offers", `[1, "zz"]`}, out: "[]\n"},
			{name: "select short key", args: []string{"select", "offers", `[1]`}, code: 2,
				err: []string{"select from offers: the key", "the key has 1 element; it needs 2 (shop, offer)"}},
			{name: "select wrong key type", args: []string{"select", "offers", `["1", "a"]`}, code: 2,
				err: []string{`key part 1 (shop): expected unsigned, got string "1"`}},
			{name: "select bad mode", args: []string{"select", "--mode", "any", "offers", `[1, "a"]`}, code: 2, err: []string{`invalid --mode "any"`}},
			{name: "select with version", args: []string{"select", "--versions", "offers", `[1, "zz"]`}, out: "[]\n"},

			{name: "update", args: []string{"update", "offers", `[1, "a"]`, `[["+", "price", 1.5]]`}, out: "[[1,\"a\",11.5]]\n"},
			{name: "update missing", args: []string{"update", "offers", `[9, "a"]`, `[["+", "price", 1]]`}, out: "[]\n"},
			{name: "update unknown field", args: []string{"update", "offers", `[1, "a"]`, `[["=", "nope", 1]]`}, code: 2,
				err: []string{"update of offers: the update", `no field is named "nope"`}},
			{name: "update wrong value type", args: []string{"update", "offers", `[1, "a"]`, `[["=", "price", "x"]]`}, code: 2,
				err: []string{"update of offers: the update", "price", "expected double"}},
			{name: "update of the primary key", args: []string{"update", "offers", `[1, "a"]`, `[["=", "offer", "z"]]`}, code: 2,
				err: []string{"update of offers", "field 2 (offer), part 2 of the primary key"}},
			{name: "update by a negative number converts as by name", args: []string{"update", "offers", `[1, "a"]`, `[["=", -1, 12]]`}, out: "[[1,\"a\",12.0]]\n"},
			{name: "update by a negative number, wrong type", args: []string{"update", "offers", `[1, "a"]`, `[["=", -1, "x"]]`}, code: 2,
				err: []string{"update of offers", `field 3 (price): expected double, got string "x"`}},

			{name: "insert a lone surrogate", args: []string{"insert", "offers", `[7, "bad\udc00surrogate"]`}, code: 2,
				err: []string{`insert into offers: the tuple: element 2 (offer): the string has \udc00 at offset 3, a surrogate that is not half of a pair, which is not valid UTF-8`}},
			{name: "insert bytes that are not UTF-8", args: []string{"insert", "offers", "[7, \"bad\xff\xfe\"]"}, code: 2,
				err: []string{"insert into offers: the tuple: element 2 (offer): the string is not valid UTF-8: byte 0xff at offset 3"}},
			{name: "select a 5 KB key", args: []string{"select", "offers", `[1, "` + strings.Repeat("k", 5000) + `"]`}, code: 2,
				err: []string{"select from offers: the key: a key of 5012 bytes is more than 4096"}},
			{name: "delete a 5 KB key", args: []string{"delete", "offers", `[1, "` + strings.Repeat("k", 5000) + `"]`}, code: 2,
				err: []string{"delete from offers: the key: a key of 5012 bytes is more than 4096"}},
			{name: "update a 5 KB key", args: []string{"update", "offers", `[1, "` + strings.Repeat("k", 5000) + `"]`, `[["=", "price", 1]]`}, code: 2,
				err: []string{"update of offers: the key: a key of 5012 bytes is more than 4096"}},

			{name: "upsert inserts", args: []string{"upsert", "offers", `[3, "u", 1]`, `[["+", "price", 1]]`}, out: "[[3,\"u\",1.0]]\n"},
			{name: "upsert updates", args: []string{"upsert", "offers", `[3, "u", 1]`, `[["+", "price", 1]]`}, out: "[[3,\"u\",2.0]]\n"},
			{name: "upsert bad ops", args: []string{"upsert", "offers", `[3, "u", 1]`, `[["?", "price", 1]]`}, code: 2, err: []string{"unknown operator"}},

			{name: "delete", args: []string{"delete", "offers", `[3, "u"]`}, out: "[[3,\"u\",2.0]]\n"},
			{name: "delete missing", args: []string{"delete", "offers", `[3, "u"]`}, out: "[]\n"},
			{name: "count", args: []string{"space", "count", "offers"}, out: "3\n"},
		})
	})

	t.Run("if-version", func(t *testing.T) {
		ver := versionOf(t, cliCase{args: []string{"replace", "--versions", "offers", `[5, "v", 1]`}, out: "-"}.check(t, addr))
		sel := versionOf(t, cliCase{args: []string{"select", "--versions", "offers", `[5, "v"]`}, out: "-"}.check(t, addr))
		if sel != ver {
			t.Fatalf("select --versions says version %d, replace said %d", sel, ver)
		}
		stale, cur := strconv.FormatUint(ver-1, 10), strconv.FormatUint(ver, 10)
		runCases(t, addr, []cliCase{
			{name: "stale replace", args: []string{"replace", "--if-version", stale, "offers", `[5, "v", 2]`}, code: 1,
				err: []string{"replace in offers", "if_version " + stale + " does not hold: the tuple's version is " + cur}},
			{name: "stale update", args: []string{"update", "--if-version", stale, "offers", `[5, "v"]`, `[["=", "price", 2]]`}, code: 1,
				err: []string{"does not hold"}},
			{name: "stale upsert", args: []string{"upsert", "--if-version", stale, "offers", `[5, "v", 2]`, `[["=", "price", 2]]`}, code: 1,
				err: []string{"does not hold"}},
			{name: "delete only if absent", args: []string{"delete", "--if-version", "0", "offers", `[5, "v"]`}, code: 1,
				err: []string{"if_version 0 does not hold"}},
			{name: "insert takes no --if-version", args: []string{"insert", "--if-version", "1", "offers", `[5, "w"]`}, code: 2,
				err: []string{"unknown flag: --if-version"}},
			{name: "current replace", args: []string{"replace", "--if-version", cur, "offers", `[5, "v", 3]`}, out: "[[5,\"v\",3.0]]\n"},
		})
	})

	t.Run("select ro", func(t *testing.T) {
		// A replica may lag; on one instance it catches up at once, but
		// poll rather than assume it.
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out, errOut := runMain(t, "select", "--peer", addr, "--mode", "ro", "--read-info", "offers", `[5, "v"]`)
			if code == 0 && out == "[[5,\"v\",3.0]]\n" {
				checkReadInfo(t, errOut, false)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("select --mode ro: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			time.Sleep(50 * time.Millisecond)
		}
		code, out, errOut := runMain(t, "select", "--peer", addr, "--read-info", "offers", `[5, "nope"]`)
		if code != 0 || out != "[]\n" {
			t.Fatalf("select --read-info: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		checkReadInfo(t, errOut, true)
	})

	t.Run("call", func(t *testing.T) {
		runCases(t, addr, []cliCase{
			{name: "echo", args: []string{"call", "echo", `[1, -2, "x", 2.5, true, null]`}, out: "[1,-2,\"x\",2.5,true,null]\n"},
			{name: "echo ro", args: []string{"call", "--mode", "ro", "echo", `[]`}, out: "[]\n"},
			{name: "count", args: []string{"call", "count", `["offers"]`}, out: "[4]\n"},
			{name: "missing procedure", args: []string{"call", "nope", `[]`}, code: 1, err: []string{"call nope", `no procedure "nope"`}},
			{name: "bad args", args: []string{"call", "echo", `1`}, code: 2, err: []string{"call echo: the argument list must be a JSON array, got number 1"}},
			{name: "args not JSON", args: []string{"call", "echo", `[1,`}, code: 2, err: []string{"call echo: the argument list is not valid JSON"}},
			{name: "map-call args not JSON", args: []string{"map-call", "echo", `[1,`}, code: 2, err: []string{"map-call echo: the argument list is not valid JSON"}},
			{name: "args not UTF-8", args: []string{"call", "echo", `["bad\udc00"]`}, code: 2, err: []string{`call echo: argument 1: the string has \udc00 at offset 3`}},
			{name: "nested args", args: []string{"call", "echo", `[[1]]`}, code: 2, err: []string{"not an array or object"}},
			{name: "bad mode", args: []string{"call", "--mode", "x", "echo", `[]`}, code: 2, err: []string{`invalid --mode "x"`}},
			{name: "by replicaset", args: []string{"call", "--replicaset", "r1", "echo", `["x"]`}, out: "[\"x\"]\n"},
			{name: "unknown replicaset", args: []string{"call", "--replicaset", "r9", "echo", `[]`}, code: 1,
				err: []string{"call echo", `no replicaset "r9" in service (replicasets in service: r1)`}},
			{name: "args from stdin", args: []string{"call", "echo", "-"}, stdin: `["in"]`, out: "[\"in\"]\n"},
			// 5 MB of arguments: refused before sending, naming the limit
			// (not sent, refused by gRPC and retried).
			{name: "oversized args", args: []string{"call", "echo", "-"}, stdin: `["` + strings.Repeat("x", 5_000_000) + `"]`, code: 2,
				err: []string{"call echo: the arguments: a tuple of 5000006 bytes is more than 1048576"}},
			{name: "map-call oversized args", args: []string{"map-call", "echo", "-"}, stdin: `["` + strings.Repeat("x", 5_000_000) + `"]`, code: 2,
				err: []string{"map-call echo: the arguments: a tuple of 5000006 bytes is more than 1048576"}},
			{name: "map-call", args: []string{"map-call", "count", `["offers"]`}, out: "{\"replicaset\":\"r1\",\"result\":[4]}\n"},
			{name: "map-call ro", args: []string{"map-call", "--mode", "ro", "echo", `["x"]`}, out: "{\"replicaset\":\"r1\",\"result\":[\"x\"]}\n"},
			{name: "map-call failing", args: []string{"map-call", "count", `["nope"]`}, code: 1,
				out: "{\"replicaset\":\"r1\",\"error\":\"no space \\\"nope\\\" (shardkit space list shows the spaces)\"}\n",
				err: []string{"map-call count", "failed on some replicasets", "r1", `no space "nope"`}},
			{name: "map-call missing procedure", args: []string{"map-call", "nope", `[]`}, code: 1, out: "-", err: []string{`no procedure "nope"`}},
			{name: "map-call bad mode", args: []string{"map-call", "--mode", "x", "echo", `[]`}, code: 2, err: []string{`invalid --mode "x"`}},
		})
	})

	t.Run("peers", func(t *testing.T) {
		dead := deadAddr(t)
		// The first peer does not answer: the command goes on to the next.
		code, out, errOut := runMain(t, "select", "--peer", dead+","+addr, "offers", `[5, "v"]`)
		if code != 0 || out != "[[5,\"v\",3.0]]\n" {
			t.Errorf("select with a dead first peer: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, out, errOut = runMain(t, "space", "count", "--peer", dead+","+addr, "offers")
		if code != 0 || lastLine(out) != "4" {
			t.Errorf("space count with a dead first peer: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, _, errOut = runMain(t, "select", "--peer", dead, "--timeout", "60s", "offers", `[5, "v"]`)
		if code != 1 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "peer "+dead+" unavailable") {
			t.Errorf("select with only a dead peer: exit %d, stderr %q", code, errOut)
		}
		code, _, errOut = runMain(t, "select", "--peer", "nohost", "offers", `[5, "v"]`)
		if code != 2 || !strings.Contains(errOut, "--peer") {
			t.Errorf("select with a bad --peer: exit %d, stderr %q", code, errOut)
		}
		code, _, errOut = runMain(t, "select", "--peer", addr, "--timeout", "0s", "offers", `[5, "v"]`)
		if code != 2 || !strings.Contains(errOut, "invalid --timeout") {
			t.Errorf("select with --timeout 0s: exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("drop", func(t *testing.T) {
		runCases(t, addr, []cliCase{
			{name: "refused while it holds tuples", args: []string{"space", "drop", "offers"}, code: 1,
				err: []string{"drop space offers", "space offers holds 4 tuples", "--force"}},
			{name: "forced", args: []string{"space", "drop", "offers", "--force"}, out: "space offers dropped (it held 4 tuples)\n"},
			{name: "gone", args: []string{"select", "offers", `[1, "a"]`}, code: 1, err: []string{`no space "offers"`}},
		})
	})
}

// checkReadInfo checks the line of --read-info.
func checkReadInfo(t *testing.T, line string, leader bool) {
	t.Helper()
	var info map[string]any
	if strings.Count(line, "\n") != 1 || json.Unmarshal([]byte(line), &info) != nil {
		t.Fatalf("--read-info printed %q; want one JSON line", line)
	}
	requireKeys(t, "read info", info, map[string]string{"replicaset": "string", "instance": "string", "leader": "bool",
		"applied_index": "number", "lag_entries": "number", "leader_contact_ms": "number"})
	if info["replicaset"] != "r1" || info["leader"] != leader || info["applied_index"].(float64) == 0 {
		t.Errorf("--read-info printed %q; want replicaset r1, leader %v", line, leader)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func regexpLine(s, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for line := range strings.SplitSeq(s, "\n") {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}
