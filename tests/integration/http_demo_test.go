package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
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
	if code, body := httpGet(t, "http://"+n.http+"/health/live"); code != 200 || !strings.Contains(body, "live") {
		t.Fatalf("/health/live: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+n.http+"/health/ready"); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("/health/ready of an Online instance: %d %s", code, body)
	}
	code, body := httpGet(t, "http://"+n.http+"/metrics")
	_, body2 := httpGet(t, "http://"+c.insts[1].http+"/metrics")
	body += body2 // the governor's metrics are on the leader, whichever it is
	for _, m := range []string{"shardkit_raft_term", "shardkit_raft_applied_index", "shardkit_instances{grade=\"Online\"} 2", "shardkit_rpc_server_seconds", "shardkit_governor_activities_total"} {
		if code != 200 || !strings.Contains(body, m) {
			t.Fatalf("/metrics lacks %s (code %d)", m, code)
		}
	}
	code, body = httpGet(t, "http://"+n.http+"/api/v1/cluster")
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
		code, body := httpGet2(other.http + "/health/ready")
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
func httpGet2(url string) (int, string) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The README's main job: `shardkit demo` starts a local cluster and prints
// its status until stopped.
func TestDemo(t *testing.T) {
	out, errs, code := shardkit(90*time.Second, "demo", "--duration", "15s", "--every", "3s")
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, errs, out)
	}
	if !strings.Contains(out, "stopped") || strings.Count(out, "Online(1)  Online(1)") < 3 {
		t.Fatalf("demo did not show 3 instances Online:\n%s", out)
	}
}
