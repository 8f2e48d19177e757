package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
)

// A bucket pinned on a replicaset that is then drained (weight 0), against
// a real two-replicaset cluster in this process: the drain moves every
// other bucket and waits for the pinned one for good. rebalance status
// (table and JSON) and --watch say so and give the command that unpins
// it; bucket show shows the pin; a move of it to where it is says that;
// expel names the pin as what keeps the replicaset from draining; once
// unpinned, it drains.
func TestAPinnedBucketHoldsADrainAndEveryCommandSaysSo(t *testing.T) {
	t.Parallel()
	const buckets = 30
	var addrs []string
	for i := range 2 {
		lis, addr := servertest.Listen(t)
		addrs = append(addrs, addr)
		servertest.Run(t, server.InstanceConfig{Listener: lis, Peers: addrs[:1], InstanceID: fmt.Sprintf("i%d", i+1),
			InitBucketCount: buckets, AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second})
	}
	peers := strings.Join(addrs, ",")
	cl, err := client.New(t.Context(), client.Config{Peers: addrs, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// waitFor polls the rebalance status until ok says it is reached, with
	// no move in progress.
	waitFor := func(what string, ok func(r2 *datav1.ReplicasetBalance) bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			st, err := cl.Sharding().Status(t.Context())
			if err == nil && !st.GetStale() && len(st.GetMoves()) == 0 {
				for _, r := range st.GetReplicasets() {
					if r.GetReplicasetId() == "r2" && ok(r) {
						return
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 3 minutes; the last status %v (%v)", what, st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("r2 balanced", func(r2 *datav1.ReplicasetBalance) bool { return r2.GetBuckets() == buckets/2 })
	var pinned uint32
	for b := uint32(1); pinned == 0; b++ {
		if rs, err := cl.Sharding().BucketReplicaset(t.Context(), b); err != nil {
			t.Fatal(err)
		} else if rs == "r2" {
			pinned = b
		}
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runMain(t, append(args, "--peer", peers)...)
	}
	if code, out, errOut := run("bucket", "pin", fmt.Sprint(pinned)); code != 0 || out != fmt.Sprintf("bucket %d: pinned\n", pinned) {
		t.Fatalf("bucket pin: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, errOut := run("replicaset", "weight", "r2", "0"); code != 0 {
		t.Fatalf("replicaset weight: exit %d: %s", code, errOut)
	}
	waitFor("r2 drained but for its pinned bucket", func(r2 *datav1.ReplicasetBalance) bool { return r2.GetBuckets() == 1 })

	waits := fmt.Sprintf("the drain of r2 (weight 0) waits for its 1 pinned bucket, which the rebalancer never moves: unpin it (shardkit bucket unpin %d)", pinned)
	code, out, errOut := run("rebalance", "status")
	if code != 0 || !strings.Contains(out, "drain waits for 1 pinned bucket (below)") || !strings.Contains(out, "buckets still to move: 0") ||
		!strings.HasSuffix(out, waits+"\n") {
		t.Errorf("rebalance status: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run("rebalance", "status", "--format", "json")
	var js struct {
		Replicasets []struct {
			ReplicasetID  string   `json:"replicaset_id"`
			PinnedBuckets []uint32 `json:"pinned_buckets"`
			DrainWaits    string   `json:"drain_waits"`
		} `json:"replicasets"`
	}
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || len(js.Replicasets) != 2 ||
		js.Replicasets[1].DrainWaits != waits || fmt.Sprint(js.Replicasets[1].PinnedBuckets) != fmt.Sprintf("[%d]", pinned) {
		t.Errorf("rebalance status --format json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	code, out, errOut = run("rebalance", "status", "--watch")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || lines[len(lines)-1] != "nothing moves the buckets left by itself: "+waits {
		t.Errorf("rebalance status --watch: exit %d, the last line %q\n%s", code, lines[len(lines)-1], errOut)
	}
	code, out, errOut = run("bucket", "show", fmt.Sprint(pinned))
	if want := fmt.Sprintf("bucket %[1]d: on r2\npinned to r2: the rebalancer leaves it there and a move of it is refused (shardkit bucket unpin %[1]d); r2 has weight 0, and its drain waits for it\n", pinned); code != 0 || out != want {
		t.Errorf("bucket show: exit %d\n%s%s\nwant\n%s", code, out, errOut, want)
	}
	code, _, errOut = run("bucket", "move", fmt.Sprint(pinned), "--to", "r2")
	if want := fmt.Sprintf("bucket %d is on r2 already", pinned); code != exitUsage || !strings.Contains(errOut, want) {
		t.Errorf("bucket move to where it is: exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, want)
	}
	code, _, errOut = run("expel", "--force", "i2")
	if want := fmt.Sprintf("it is the last instance of replicaset r2, which holds 1 bucket, and its data would be lost; "+
		"r2 cannot be drained while 1 bucket on it is pinned (the rebalancer never moves a pinned bucket): unpin it first (shardkit bucket unpin %d), then drain r2 while it runs", pinned); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("expel: exit %d, stderr %q; want %q", code, errOut, want)
	}
	if code, out, errOut := run("bucket", "unpin", fmt.Sprint(pinned)); code != 0 || out != fmt.Sprintf("bucket %d: unpinned\n", pinned) {
		t.Fatalf("bucket unpin: exit %d\n%s%s", code, out, errOut)
	}
	waitFor("r2 drained", func(r2 *datav1.ReplicasetBalance) bool { return r2.GetBuckets() == 0 && r2.GetDrainWaits() == "" })
}
