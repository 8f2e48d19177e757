package integration

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := httpClient(t, 5*time.Second).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The HTTP endpoints: health, metrics and the status JSON.
func TestHTTPEndpoints(t *testing.T) {
	c := newCluster(t, 2)
	c.startAll()
	c.waitOnline(2)
	n := c.insts[0]
	if code, body := httpGet(t, httpBase()+n.http+"/health/live"); code != 200 || !strings.Contains(body, "live") {
		t.Fatalf("/health/live: %d %s", code, body)
	}
	if code, body := httpGet(t, httpBase()+n.http+"/health/ready"); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("/health/ready of an Online instance: %d %s", code, body)
	}
	code, body := httpGet(t, httpBase()+n.http+"/metrics")
	_, body2 := httpGet(t, httpBase()+c.insts[1].http+"/metrics")
	body += body2 // the governor's metrics are on the leader, whichever it is
	for _, m := range []string{"shardkit_raft_term", "shardkit_raft_applied_index", "shardkit_raft_lease_reads_total", "shardkit_raft_read_indexes_total", "shardkit_raft_proposals_total", "shardkit_raft_proposal_batches_total", "shardkit_raft_persist_seconds_bucket{sync=\"true\"", "shardkit_raft_persist_bytes_count", "shardkit_raft_apply_seconds_count{group=\"meta\"}", "shardkit_instances{grade=\"Online\"} 2", "shardkit_rpc_server_seconds", "shardkit_storage_memtables", "shardkit_storage_l0_sublevels", "shardkit_storage_compaction_debt_bytes", "shardkit_storage_flushes_total", "shardkit_storage_ingests_total", "shardkit_storage_flushable_tables_total", "shardkit_governor_activities_total"} {
		if code != 200 || !strings.Contains(body, m) {
			t.Fatalf("/metrics lacks %s (code %d)", m, code)
		}
	}
	code, body = httpGet(t, httpBase()+n.http+"/api/v1/cluster")
	var st statusJSON
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || len(st.Instances) != 2 || st.LeaderRaftID == 0 {
		t.Fatalf("/api/v1/cluster: %d %v %s", code, err, body)
	}
	// An instance that is not Online is not ready, and says why.
	other := c.insts[1]
	other.term(t)
	other.start(t)
	deadline := time.Now().Add(30 * time.Second)
	sawNotReady := false
	for time.Now().Before(deadline) {
		code, body := httpGet2(t, other.http+"/health/ready")
		if code == 503 && strings.Contains(body, "not_ready") && strings.Contains(body, "reason") {
			sawNotReady = true
		}
		if code == 200 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawNotReady {
		t.Fatalf("a restarting instance never answered 503 with a reason on /health/ready")
	}
}

// httpGet2 is httpGet without failing on connection errors (code 0).
func httpGet2(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := httpClient(t, 2*time.Second).Get(httpBase() + url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The README's main job: `shardkit demo` starts a local cluster and prints
// its status until stopped.
//
// Its logs and data dirs are named by the cluster's instance ids (they
// used to be named by start order, so i2.log could be the cluster's i1), it
// says how to run status against it, and it explains the bucket columns.
// By default six instances with replication factor 3 make two
// replicasets, and a sample space gets its rows.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	out, errs, code := shardkit(150*time.Second, "demo", "--duration", "40s", "--every", "3s", "--data-dir", dir, "--rows", "200")
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, errs, out)
	}
	if !strings.Contains(out, "stopped") || strings.Count(out, "Online(1)  Online(1)") < 6 {
		t.Fatalf("demo did not show 6 instances Online:\n%s", out)
	}
	for _, want := range []string{"6 instances, replication factor 3 (2 replicasets)", "shardkit status --peer 127.0.0.1:",
		"shardkit select --peer 127.0.0.1:", "TARGET_BUCKETS: what its weight asks for", "shardkit rebalance status",
		"sample space offers: 200 rows", "web console: https://127.0.0.1:", "as user admin, password in " + filepath.Join(dir, "console-password")} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "console-password")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the console's password file: %v, %v", fi, err)
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("demo redrew the screen although its output is not a terminal:\n%s", out)
	}
	// The last table's address of each instance is the one its log's
	// process listened on.
	addrOf := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 7 && strings.HasPrefix(f[0], "i") && strings.Contains(l, "Online(") {
			for _, x := range f {
				if strings.HasPrefix(x, "127.0.0.1:") {
					addrOf[f[0]] = x
				}
			}
		}
	}
	for _, id := range []string{"i1", "i2", "i3", "i4", "i5", "i6"} {
		b, err := os.ReadFile(filepath.Join(dir, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if addrOf[id] == "" || !strings.Contains(string(b), `msg="instance started" listen=`+addrOf[id]+" ") {
			t.Fatalf("%s.log is not the log of the cluster's %s (at %q):\n%s", id, id, addrOf[id], out)
		}
	}
}

// The demo's commands to try run as pasted into another shell, from any
// directory: they start with the full path of the binary, not its name
// (which need not be on PATH).
func TestDemoCommandsRunAsPasted(t *testing.T) {
	dir := t.TempDir()
	demo := exec.Command(binary, "demo", "--instances", "3", "--rows", "0", "--every", "1s", "--duration", "3m", "--data-dir", dir)
	out, err := demo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	demo.Stderr = os.Stderr
	if err := demo.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		// Reads all the demo prints, so that it never blocks on a full pipe.
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if l := sc.Text(); !found && strings.Contains(l, " status --peer ") {
				found = true
				lines <- strings.TrimSpace(l)
			}
		}
		close(lines)
		done <- demo.Wait()
	}()
	defer func() {
		_ = demo.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("demo: %v", err)
			}
		case <-time.After(90 * time.Second):
			_ = demo.Process.Kill()
			t.Error("the demo did not stop within 90s of SIGTERM")
		}
	}()
	var status string
	select {
	case status = <-lines:
	case <-time.After(60 * time.Second):
		t.Fatal("the demo printed no status command within 60s")
	}
	if status == "" {
		t.Fatal("the demo ended without printing a status command")
	}
	if want := binary + " status --peer 127.0.0.1:"; !strings.HasPrefix(status, want) {
		t.Fatalf("the demo's status command %q does not start with %q", status, want)
	}
	// Pasted into a shell elsewhere, with a PATH that has no shardkit.
	deadline := time.Now().Add(90 * time.Second)
	for {
		sh := exec.Command("/bin/sh", "-c", status)
		sh.Dir, sh.Env = t.TempDir(), []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		b, err := sh.CombinedOutput()
		if err == nil && strings.Count(string(b), "Online(") >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, pasted: %v\n%s", status, err, b)
		}
		time.Sleep(time.Second)
	}
}
