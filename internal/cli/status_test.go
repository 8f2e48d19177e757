package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/statusview"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata golden files")

func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, nil, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestStatusJSONGolden(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{status: sampleStatus()}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "status", "--peer", addr, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	golden := filepath.Join("testdata", "status.golden.json")
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("status JSON differs from %s (go test -run TestStatusJSONGolden -update to rewrite):\n%s", golden, out)
	}
	if r := f.lastStatusReq(); r == nil || r.GetAll() {
		t.Errorf("request %v: want all=false", r)
	}
}

// TestStatusJSONShape checks the contract of the issue independently of
// the golden file: the key names, their JSON types and the order.
func TestStatusJSONShape(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{status: sampleStatus()}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "status", "--peer", addr, "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	requireKeys(t, "status", doc, map[string]string{
		"cluster_id": "string", "cluster_uuid": "string", "leader_raft_id": "number", "term": "number",
		"commit_index": "number", "instances": "array", "replicasets": "array",
	})
	instances := doc["instances"].([]any)
	var ids []string
	for _, x := range instances {
		in := x.(map[string]any)
		requireKeys(t, "instance", in, map[string]string{
			"instance_id": "string", "raft_id": "number", "uuid": "string", "replicaset_id": "string",
			"address": "string", "failure_domain": "object", "raft_role": "string",
			"current_grade": "object", "target_grade": "object",
		})
		for _, g := range []string{"current_grade", "target_grade"} {
			gr := in[g].(map[string]any)
			requireKeys(t, g, gr, map[string]string{"variant": "string", "incarnation": "number"})
			if !slices.Contains([]string{"Offline", "RaftSynced", "Replicated", "ShardingInitialized", "Online", "Expelled"}, gr["variant"].(string)) {
				t.Errorf("variant %q is not one of the six", gr["variant"])
			}
		}
		if r := in["raft_role"].(string); r != "voter" && r != "learner" && r != "none" {
			t.Errorf("raft_role %q", r)
		}
		ids = append(ids, in["instance_id"].(string))
	}
	if strings.Join(ids, ",") != "i1,i2,i3" {
		t.Errorf("instances %v: want i1,i2,i3 by raft_id, no expelled i4", ids)
	}
	if role := instances[2].(map[string]any)["raft_role"]; role != "learner" {
		t.Errorf("i3 role %v: want learner (from the learner list)", role)
	}
	var rsIDs []string
	for _, x := range doc["replicasets"].([]any) {
		rs := x.(map[string]any)
		requireKeys(t, "replicaset", rs, map[string]string{
			"replicaset_id": "string", "uuid": "string", "leader_instance_id": "string", "weight": "number",
			"instances": "array", "bucket_count": "number",
		})
		rsIDs = append(rsIDs, rs["replicaset_id"].(string))
	}
	if strings.Join(rsIDs, ",") != "r1,r2" {
		t.Errorf("replicasets %v: want r1,r2, no expelled r3", rsIDs)
	}
	// The fields come first, in its order.
	order := []string{`"cluster_id"`, `"cluster_uuid"`, `"leader_raft_id"`, `"term"`, `"commit_index"`, `"instances"`}
	last := -1
	for _, k := range order {
		i := strings.Index(out, k)
		if i <= last {
			t.Errorf("key %s out of order", k)
		}
		last = i
	}
}

func requireKeys(t *testing.T, what string, m map[string]any, keys map[string]string) {
	t.Helper()
	for k, typ := range keys {
		v, ok := m[k]
		if !ok {
			t.Errorf("%s lacks %q", what, k)
			continue
		}
		got := "null"
		switch v.(type) {
		case string:
			got = "string"
		case float64:
			got = "number"
		case []any:
			got = "array"
		case map[string]any:
			got = "object"
		case bool:
			got = "bool"
		}
		if got != typ {
			t.Errorf("%s.%s is %s, want %s", what, k, got, typ)
		}
	}
}

func TestStatusAll(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{status: sampleStatus()}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "status", "--peer", addr, "--format", "json", "--all")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if r := f.lastStatusReq(); r == nil || !r.GetAll() {
		t.Errorf("request %v: want all=true", r)
	}
	var st statusview.View
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Instances) != 4 || st.Instances[3].InstanceID != "i4" || st.Instances[3].CurrentGrade.Variant != "Expelled" {
		t.Errorf("instances with --all: %+v", st.Instances)
	}
	if len(st.Replicasets) != 3 || st.Replicasets[2].ReplicasetID != "r3" || !st.Replicasets[2].Expelled {
		t.Errorf("replicasets with --all: %+v", st.Replicasets)
	}
}

func TestStatusTable(t *testing.T) {
	t.Parallel()
	f := &fakeCluster{status: sampleStatus()}
	addr := f.serve(t)
	code, out, errOut := runMain(t, "status", "--peer", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	want := []string{
		"cluster demo  uuid c0ffee00-0000-4000-8000-000000000001  term 3  commit 42  leader i1 (raft_id 1)",
		"INSTANCE  RAFT_ID  REPLICASET  ROLE     CURRENT     TARGET         ADDRESS         FAILURE_DOMAIN  TARGET_REASON",
		"i1 *      1        r1          voter    Online(3)   Online(3)      127.0.0.1:3301  dc=msk          online",
		"i2        2        r1          voter    Online(1)   Online(1)      127.0.0.1:3302  dc=spb,rack=2   online",
		"i3        3        r2          learner  Offline(1)  RaftSynced(2)  127.0.0.1:3303  -               auto-online",
		"(* the Raft leader; 3 instances)",
		"REPLICASET  LEADER  WEIGHT  BUCKETS  TARGET_BUCKETS  INSTANCES",
		"r1          i1      1       3000     3000            i1,i2",
		"r2          i3      0       0        0               i3",
	}
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("table lacks line %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "i4") || strings.Contains(out, "r3") {
		t.Errorf("expelled shown without --all:\n%s", out)
	}
	code, out, _ = runMain(t, "status", "--peer", addr, "--all")
	if code != 0 || !strings.Contains(out, "Expelled(2)") || !strings.Contains(out, "r3 (expelled)") {
		t.Errorf("--all table lacks the expelled:\n%s", out)
	}
}

func TestStatusErrors(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	tests := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"unreachable peer", []string{"status", "--peer", dead, "--timeout", "5s"}, []string{"peer " + dead, "unavailable"}},
		{"bad peer address", []string{"status", "--peer", "localhost"}, []string{"--peer", `"localhost"`}},
		{"bad format", []string{"status", "--format", "yaml"}, []string{"--format", `"yaml"`}},
		{"bad timeout", []string{"status", "--timeout", "0s"}, []string{"--timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runMain(t, tt.args...)
			if code == 0 {
				t.Fatalf("exit 0, output %q", out)
			}
			if strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr %q: want one line", errOut)
			}
			for _, w := range tt.wants {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q lacks %q", errOut, w)
				}
			}
		})
	}
}

func TestStatusUnimplementedServer(t *testing.T) {
	t.Parallel()
	// A server without GetStatus: its gRPC message is shown.
	f := &fakeCluster{}
	addr := f.serveWithout(t)
	code, _, errOut := runMain(t, "status", "--peer", addr)
	if code == 0 || !strings.Contains(errOut, "peer "+addr) || !strings.Contains(errOut, "not implemented") {
		t.Errorf("exit %d stderr %q", code, errOut)
	}
}

// Without a quorum in group 0 the status is still printed, but it says
// so (how many voters answer, which do not, the grades marked as last
// known) and the command exits 3. It used to show every instance Online,
// "leader none known", and exit 0.
func TestStatusWithoutQuorum(t *testing.T) {
	t.Parallel()
	st := sampleStatus()
	st.LeaderRaftId = 0
	st.Quorum = &clusterv1.QuorumStatus{HasQuorum: false, Voters: []uint64{1, 2, 3}, VotersAnswering: []uint64{1}, VotersNotAnswering: []uint64{2, 3}}
	f := &fakeCluster{status: st}
	addr := f.serve(t)

	code, out, errOut := runMain(t, "status", "--peer", addr)
	if code != exitNoQuorum {
		t.Fatalf("exit %d, want %d: %s", code, exitNoQuorum, errOut)
	}
	for _, w := range []string{
		"leader none known (no quorum)",
		"NO QUORUM: group 0 has no quorum: 1 of 3 voters answer (i1); i2, i3 do not; 2 are needed.",
		"Online(3)?",
		"? the last known grade",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "1 of 3 voters answer") {
		t.Errorf("stderr %q: want one line with the quorum", errOut)
	}

	code, out, _ = runMain(t, "status", "--peer", addr, "--format", "json")
	if code != exitNoQuorum {
		t.Fatalf("json: exit %d, want %d", code, exitNoQuorum)
	}
	var v statusview.View
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	if v.Quorum.HasQuorum || !v.GradesLastKnown || !slices.Equal(v.Quorum.VotersNotAnswering, []uint64{2, 3}) || !slices.Equal(v.Quorum.VotersAnswering, []uint64{1}) {
		t.Errorf("json quorum %+v, grades_last_known %v", v.Quorum, v.GradesLastKnown)
	}
}

// --peer at an HTTP port (an instance's --http-listen) used to print
// gRPC's HTTP/2 framing error. It says what the port is, and, when the
// HTTP server is an instance's, which address is its gRPC port.
func TestStatusAtTheHTTPPort(t *testing.T) {
	t.Parallel()
	var httpAddr string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/cluster", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"instances":[{"address":"127.0.0.1:3302","http_address":"127.0.0.1:9"},{"address":"127.0.0.1:3301","http_address":%q}]}`, httpAddr)
	})
	shardkitHTTP := httptest.NewServer(mux)
	defer shardkitHTTP.Close()
	httpAddr = shardkitHTTP.Listener.Addr().String()
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()

	for _, tc := range []struct {
		addr, want string
	}{
		{httpAddr, "the gRPC port of that instance is 127.0.0.1:3301 (its --listen): use --peer 127.0.0.1:3301"},
		{other.Listener.Addr().String(), "give --peer an instance's --listen address"},
	} {
		code, _, errOut := runMain(t, "status", "--peer", tc.addr, "--timeout", "5s")
		if code == 0 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "this looks like an HTTP port") || !strings.Contains(errOut, tc.want) {
			t.Errorf("status --peer %s: exit %d, stderr %q; want one line saying %q", tc.addr, code, errOut, tc.want)
		}
		if strings.Contains(errOut, "http2") {
			t.Errorf("stderr %q still shows the HTTP/2 framing error", errOut)
		}
	}
}

// A --peer that accepts connections and never answers (a stopped
// process) leaves time to ask the next one: each instance gets its share
// of --timeout, as in the data commands (docs/data.md). status (and every
// command on the same path) used to spend all of --timeout on the first
// and fail naming it.
func TestClusterCommandsAskTheNextPeerWhenOneHangs(t *testing.T) {
	t.Parallel()
	hung := hangingAddr(t)
	status := (&fakeCluster{status: sampleStatus()}).serve(t)
	sharding := (&fakeSharding{resp: balance(false)}).serve(t)
	unimplemented := (&fakeCluster{}).serveWithout(t)
	tests := []struct {
		name string
		addr string
		args []string
		code int
		want string // in stdout when code is 0, else in stderr
	}{
		{"status", status, []string{"status"}, 0, "cluster demo"},
		{"rebalance status", sharding, []string{"rebalance", "status"}, 0, "r1"},
		{"rebalance config", sharding, []string{"rebalance", "config", "--threshold", "2"}, 0, "threshold=2.00%"},
		{"replicaset weight", sharding, []string{"replicaset", "weight", "r1", "2"}, 1, "peer " + sharding},
		{"user list", unimplemented, []string{"user", "list"}, 1, "peer " + unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A hung first peer given all of --timeout would fail the
			// command: answering at all means the next peer was asked.
			args := append(append([]string{}, tt.args...), "--peer", hung+","+tt.addr, "--timeout", "4s")
			code, out, errOut := runMain(t, args...)
			if code != tt.code {
				t.Fatalf("%v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, tt.code, out, errOut)
			}
			got := out
			if code != 0 {
				got = errOut
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("%v: output %q lacks %q (stderr %q)", args, got, tt.want, errOut)
			}
		})
	}
}
