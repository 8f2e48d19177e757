package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/tests/framework"
)

// An instance whose --peer list names a peer that never answers waits in
// discovery (it must: that peer may be an instance still starting), but no
// longer silently: it warns periodically, naming the peer and for how
// long; `shardkit status` and /health/ready name the peer too. (It used
// to log "discovering peers" once, and status said only that it was not
// part of a running cluster yet.)
func TestDiscoveryNamesTheSilentPeer(t *testing.T) {
	dead := framework.FreePorts(t, 1)[0] // nothing listens there
	c := newCluster(t, 1, "--peer", dead)
	inst := c.insts[0]
	inst.start(t)

	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(inst.LogText(), "still waiting for peers that do not answer") {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the silent peer after 60s:\n%s", inst.LastRun())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var warning string
	for _, l := range strings.Split(inst.LogText(), "\n") {
		if strings.Contains(l, "still waiting for peers that do not answer") {
			warning = l
			break
		}
	}
	if !strings.Contains(warning, dead+" for ") || !strings.Contains(warning, "connection refused") {
		t.Fatalf("the warning does not name %s, how long and why: %s", dead, warning)
	}

	_, errs, code := shardkit(30*time.Second, "status", "--peer", inst.Listen)
	if code == 0 || !strings.Contains(errs, "discovering peers") || !strings.Contains(errs, "no answer from "+dead+" for ") {
		t.Fatalf("status of a discovering instance: exit %d, stderr %q; want it to name %s", code, errs, dead)
	}
	hc, body := httpGet(t, httpBase()+inst.http+"/health/ready")
	if hc != 503 || !strings.Contains(body, "no answer from "+dead+" for ") {
		t.Fatalf("/health/ready of a discovering instance: %d %s; want 503 naming %s", hc, body, dead)
	}
	t.Logf("status: %s", strings.TrimSpace(errs))

	inst.term(t)
	if code := inst.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("a discovering instance stopped with exit code %d", code)
	}
}
