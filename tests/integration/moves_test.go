package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/mover"
	"github.com/shardkit/shardkit/internal/replicaset"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
	"github.com/shardkit/shardkit/tuple"
)

// Bucket moves with real processes: scale out and drain under a live
// load, and a crash (kill -9) at every step of a move, on the source and
// the destination, leader and follower, and on the mover.

func newClient(t *testing.T, c *cluster) *client.Client {
	t.Helper()
	var peers []string
	for _, inst := range c.insts {
		peers = append(peers, inst.Listen)
	}
	cl, err := client.New(t.Context(), client.Config{Peers: peers, Timeout: 5 * time.Second, Attempts: 20, Credentials: testCredentials(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func createSpace(t *testing.T, cl *client.Client) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := cl.CreateSpace(t.Context(), client.SpaceDef{Name: "kv", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeUnsigned}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			if _, err = cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(0), tuple.Uint(0)}); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the space: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// load writes rows 0..keys-1 over and over until stopped, recording the
// last value acknowledged for each key and every error.
type load struct {
	cl   *client.Client
	keys uint64
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	last   map[uint64]uint64
	errs   []error
	writes atomic.Int64
}

func startLoad(t *testing.T, cl *client.Client, keys uint64, workers int, deadline time.Duration) *load {
	t.Helper()
	l := &load{cl: cl, keys: keys, stop: make(chan struct{}), last: map[uint64]uint64{}}
	for w := range workers {
		l.wg.Go(func() {
			for i := uint64(w); ; i += uint64(workers) {
				select {
				case <-l.stop:
					return
				default:
				}
				k, v := i%keys, i
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				_, err := cl.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(k), tuple.Uint(v)})
				cancel()
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, fmt.Errorf("replace %d: %w", k, err))
				} else if v >= l.last[k] {
					l.last[k] = v
				}
				l.mu.Unlock()
				l.writes.Add(1)
			}
		})
	}
	return l
}

func (l *load) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	if len(l.errs) > 0 {
		t.Errorf("the load saw %d errors during the moves (a user must see latency, not errors); first: %v", len(l.errs), l.errs[0])
	}
	// Every key holds at least the last value acknowledged for it (a
	// worker owns its keys, so a later value is a later write of its own).
	for k, v := range l.last {
		r, _, err := l.cl.Space("kv").Select(context.Background(), []tuple.Value{tuple.Uint(k)}, client.RW)
		got, _ := r.Tuple[1].AsUint()
		if err != nil || !r.Found || got < v {
			t.Errorf("key %d: read %v (found %v, %v), acknowledged %d", k, r.Tuple, r.Found, err, v)
		}
	}
}

// audit asks every replicaset's leader for its bucket records: with no
// move under way, each bucket must be held (active or receiving) by
// exactly one.
func audit(t *testing.T, c *cluster, st *statusJSON, buckets uint32) map[string]int {
	t.Helper()
	holder := map[uint32]string{}
	held := map[string]int{}
	creds := nodeCredentials(t)
	for _, rs := range st.Replicasets {
		var resp *rspb.BucketsResponse
		for _, id := range rs.Instances {
			inst := st.byInstanceID(id)
			if inst == nil {
				continue
			}
			conn, err := grpc.NewClient(inst.Address, grpc.WithTransportCredentials(creds))
			if err != nil {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err = rspb.NewBucketServiceClient(conn).Buckets(ctx, &rspb.BucketsRequest{ReplicasetId: rs.ReplicasetID})
			cancel()
			conn.Close()
			if err == nil {
				break
			}
		}
		if resp == nil {
			t.Fatalf("no leader of %s answered for its buckets", rs.ReplicasetID)
		}
		for b, s := range resp.GetBuckets() {
			if s.GetState() != rspb.BucketState_STATE_ACTIVE && s.GetState() != rspb.BucketState_STATE_RECEIVING {
				continue
			}
			if holder[b] != "" {
				t.Errorf("bucket %d is held by %s and %s", b, holder[b], rs.ReplicasetID)
			}
			holder[b] = rs.ReplicasetID
			held[rs.ReplicasetID]++
		}
	}
	for b := uint32(1); b <= buckets; b++ {
		if holder[b] == "" {
			t.Errorf("bucket %d is held by no replicaset", b)
		}
	}
	return held
}

func (s *statusJSON) byInstanceID(id string) *instanceJSON {
	for i := range s.Instances {
		if s.Instances[i].InstanceID == id {
			return &s.Instances[i]
		}
	}
	return nil
}

// Scale out 1 -> 2 replicasets and drain 2 -> 1, replication factor 3,
// under a live load that sees no error, with no command for the scale-out.
func TestScaleOutAndDrainUnderLoad(t *testing.T) {
	// A tenth of the default bucket count: the same moves, in less time.
	const buckets = 300
	c := newCluster(t, 3, "--init-replication-factor", "3", "--init-bucket-count", fmt.Sprint(buckets))
	c.startAll()
	c.waitOnline(3)
	cl := newClient(t, c)
	createSpace(t, cl)
	ld := startLoad(t, cl, 300, 4, 30*time.Second)

	// The scale out runs with the copy paced (at a rate these few rows
	// never reach); a rate that is not a size is refused and says so.
	if out, errs, code := shardkitConfirmed(30*time.Second, "rebalance", "config", "--copy-rate", "64MiB", "--peer", c.peers[0]); code != 0 || !strings.Contains(out, "copy-rate=64MiB") {
		t.Fatalf("rebalance config --copy-rate 64MiB: exit %d: %s %s", code, out, errs)
	}
	if out, errs, code := shardkit(30*time.Second, "rebalance", "config", "--copy-rate", "fast", "--peer", c.peers[0]); code == 0 || !strings.Contains(errs, "--copy-rate") {
		t.Fatalf("rebalance config --copy-rate fast: exit %d: %s %s; want a refusal naming --copy-rate", code, out, errs)
	}
	if out, errs, code := shardkitConfirmed(30*time.Second, "rebalance", "status", "--peer", c.peers[0]); code != 0 || !strings.Contains(out, "copy rate 64MiB/s") {
		t.Fatalf("rebalance status after --copy-rate 64MiB: exit %d: %s %s", code, out, errs)
	}

	for range 3 {
		c.add().start(t)
	}
	st := c.waitStatus("half the buckets on each of two replicasets", 5*time.Minute, func(s *statusJSON) bool {
		return len(s.Replicasets) == 2 && s.Replicasets[0].BucketCount == buckets/2 && s.Replicasets[1].BucketCount == buckets/2
	})
	// Replicasets are named after their first instance: r1 and r4 here.
	src, dst := st.Replicasets[0].ReplicasetID, st.Replicasets[1].ReplicasetID
	if held := audit(t, c, st, buckets); held[src] != buckets/2 || held[dst] != buckets/2 {
		t.Fatalf("after the scale-out the replicasets hold %v", held)
	}
	// Drain the new one; then its instances may be expelled.
	if out, errs, code := shardkit(30*time.Second, "replicaset", "weight", dst, "0", "--peer", c.peers[0]); code != 0 {
		t.Fatalf("replicaset weight: %s %s", out, errs)
	}
	st = c.waitStatus("the new replicaset drained", 5*time.Minute, func(s *statusJSON) bool {
		return len(s.Replicasets) == 2 && s.Replicasets[0].BucketCount == buckets && s.Replicasets[1].BucketCount == 0
	})
	if held := audit(t, c, st, buckets); held[src] != buckets {
		t.Fatalf("after the drain %s holds %d buckets", src, held[src])
	}
	// Its instances are expelled while they run, its leader first (the
	// governor transfers the leadership of a replicaset it leads, asking
	// the leaving instance itself), the last one too: it holds no bucket.
	drained := st.Replicasets[1]
	order := []string{drained.LeaderInstanceID}
	for _, id := range drained.Instances {
		if id != drained.LeaderInstanceID {
			order = append(order, id)
		}
	}
	for _, id := range order {
		if out, errs, code := shardkit(90*time.Second, "expel", id, "--force", "--timeout", "60s", "--peer", c.peers[0]); code != 0 {
			t.Fatalf("expel --force %s of the drained %s: exit %d: %s %s", id, dst, code, out, errs)
		}
		t.Logf("expelled %s of the drained %s", id, dst)
	}
	ld.finish(t)
	n, err := cl.Count(t.Context(), "kv")
	if err != nil || n != 300 {
		t.Fatalf("count %d, %v after scale-out and drain, want 300", n, err)
	}
	t.Logf("%d writes during the scale-out and the drain", ld.writes.Load())
}

// The source replicaset's leader is killed (kill -9) while the buckets
// move to a new replicaset, and started again 3 s later: the writers,
// with a client of default settings and calls of a 5 s deadline, see no
// error (the replicaset elects a leader and reports it to group 0, the
// clients pass over the dead address and follow the members' redirects,
// and a write retried after its bucket moved is deduplicated there),
// every acknowledged write is there, and every member's data passes
// `shardkit check-data`.
func TestAKilledSourceLeaderDuringAScaleOutFailsNoCall(t *testing.T) {
	const buckets = 3000 // the default: a scale-out long enough to kill in
	c := newCluster(t, 3, "--init-replication-factor", "3", "--init-bucket-count", fmt.Sprint(buckets))
	c.startAll()
	c.waitOnline(3)
	createSpace(t, newClient(t, c))
	cl, err := client.New(t.Context(), client.Config{Peers: []string{c.peers[0], c.peers[1], c.peers[2]}, Credentials: testCredentials(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	ld := startLoad(t, cl, 2000, 16, 5*time.Second)

	for range 3 {
		c.add().start(t)
	}
	st := c.waitStatus("the buckets moving to a second replicaset", 5*time.Minute, func(s *statusJSON) bool {
		return len(s.Replicasets) == 2 && s.Replicasets[1].BucketCount > 0 && s.Replicasets[1].BucketCount < buckets/2
	})
	victim := c.instanceAt(st.byInstanceID(st.Replicasets[0].LeaderInstanceID).Address)
	t.Logf("killing %s, the leader of %s, with %d buckets moved", victim.Name, st.Replicasets[0].ReplicasetID, st.Replicasets[1].BucketCount)
	victim.Kill()
	time.Sleep(3 * time.Second)
	victim.start(t)
	c.waitStatus("half the buckets on each of two replicasets", 5*time.Minute, func(s *statusJSON) bool {
		return len(s.Replicasets) == 2 && s.Replicasets[0].BucketCount == buckets/2 && s.Replicasets[1].BucketCount == buckets/2
	})
	ld.finish(t)
	t.Logf("%d writes during the scale-out and the kill", ld.writes.Load())
	// Each member's data, stopped: the killed leader's too, which caught
	// up on the moves it missed.
	c.checkData(t, 6)
}

// setFailpoint sets a failpoint on an instance's worker over HTTP.
func setFailpoint(t *testing.T, inst *instance, name, action string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodPut, httpBase()+inst.http+"/debug/failpoints/"+name, strings.NewReader(action))
		resp, err := httpClient(t, 5*time.Second).Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
			err = fmt.Errorf("HTTP %s", resp.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("failpoint %s on %s: %v", name, inst.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clearFailpoint(t *testing.T, inst *instance, name string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, httpBase()+inst.http+"/debug/failpoints/"+name, nil)
	if resp, err := httpClient(t, 5*time.Second).Do(req); err == nil {
		resp.Body.Close()
	}
}

// A kill -9 at every step of a move, at every place the step happens:
// the move resumes (after the supervisor restarts the worker) and the
// bucket ends on exactly one replicaset with its rows.
func TestAMoveSurvivesAKillAtEveryStep(t *testing.T) {
	if buildTags != "failpoints" {
		t.Skip("needs a binary with failpoints: go test -tags failpoints")
	}
	c := newCluster(t, 2, "--init-replication-factor", "2")
	c.startAll()
	c.waitOnline(2)
	if out, errs, code := shardkitConfirmed(30*time.Second, "rebalance", "config", "--disable", "--peer", c.peers[0]); code != 0 {
		t.Fatalf("rebalance config: %s %s", out, errs)
	}
	c.add("--init-replication-factor", "2").start(t)
	c.add("--init-replication-factor", "2").start(t)
	st := c.waitStatus("two replicasets of two", 2*time.Minute, func(s *statusJSON) bool {
		return s.count(online) == 4 && len(s.Replicasets) == 2 && s.Replicasets[1].Weight > 0
	})
	// Replicasets are named after their first instance: r1 and r3 here.
	src, dst := st.Replicasets[0].ReplicasetID, st.Replicasets[1].ReplicasetID
	cl := newClient(t, c)
	createSpace(t, cl)
	const rows = 3000
	for k := range uint64(rows) {
		if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.Uint(k)}); err != nil {
			t.Fatalf("replace %d: %v", k, err)
		}
	}
	type scenario struct {
		failpoint string
		rs        string // whose member dies: src, dst, "" (the group-0 leader: the mover)
		leader    bool
	}
	var scenarios []scenario
	for _, fp := range mover.Steps {
		scenarios = append(scenarios, scenario{fp, "", true})
	}
	rsSteps := []struct {
		state string
		rs    string
	}{{"STATE_RECEIVING", dst}, {"STATE_SENDING", src}, {"STATE_ACTIVE", dst}, {"STATE_GARBAGE", src}}
	all := os.Getenv("SHARDKIT_MOVE_FAILPOINTS_ALL") != ""
	for i, s := range rsSteps {
		fp := replicaset.FailpointAppliedSetBucket + "/" + s.state
		if all {
			scenarios = append(scenarios, scenario{fp, s.rs, true}, scenario{fp, s.rs, false})
		} else {
			scenarios = append(scenarios, scenario{fp, s.rs, i%2 == 0})
		}
	}
	scenarios = append(scenarios, scenario{replicaset.FailpointAppliedCopyChunk, dst, false})

	// Buckets that hold rows, from r1.
	var buckets []uint32
	seen := map[uint32]bool{}
	for k := uint64(0); len(buckets) < len(scenarios); k++ {
		b, err := cl.Space("kv").Bucket(t.Context(), tuple.Uint(k))
		if err != nil {
			t.Fatal(err)
		}
		if !seen[b] {
			seen[b] = true
			buckets = append(buckets, b)
		}
	}
	for i, sc := range scenarios {
		st = c.waitStatus("every instance Online", 2*time.Minute, func(s *statusJSON) bool { return s.count(online) == 4 && s.LeaderRaftID != 0 })
		var victim *instance
		if sc.rs == "" {
			victim = c.leader(st)
		} else {
			for _, rs := range st.Replicasets {
				if rs.ReplicasetID != sc.rs {
					continue
				}
				for _, id := range rs.Instances {
					if (id == rs.LeaderInstanceID) == sc.leader {
						victim = c.instanceAt(st.byInstanceID(id).Address)
					}
				}
			}
		}
		if victim == nil {
			t.Fatalf("scenario %d: no victim for %+v in %+v", i, sc, st.Replicasets)
		}
		for _, inst := range c.insts {
			clearFailpoint(t, inst, sc.failpoint)
		}
		setFailpoint(t, victim, sc.failpoint, "kill")
		b := buckets[i]
		what := fmt.Sprintf("scenario %d: bucket %d, %s on %s (%s, leader %v)", i, b, sc.failpoint, victim.Name, sc.rs, sc.leader)
		move := func() (string, string, int) {
			return shardkit(30*time.Second, "bucket", "move", fmt.Sprint(b), "--to", dst, "--peer", strings.Join(c.peers, ","))
		}
		out, errs, code := move()
		// The last scenario's victim may not be Online again yet: the
		// move is refused before it starts ("has no quorum"), so asking
		// again is safe.
		for deadline := time.Now().Add(30 * time.Second); code != 0 && strings.Contains(errs, "has no quorum") && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			out, errs, code = move()
		}
		if code != 0 {
			// The mover is the group-0 leader, which serves the call: killed
			// at a step the move reaches before the call is answered, it
			// takes the answer with it. The outcome is unknown, and the next
			// leader drives the move on (waited for below).
			if sc.rs != "" || !strings.Contains(errs, "EOF") && !strings.Contains(errs, "unavailable") {
				t.Fatalf("%s: bucket move: %s %s", what, out, errs)
			}
			t.Logf("%s: the call died with the mover that served it: %s", what, strings.TrimSpace(errs))
		}
		c.waitStatus(what+": the move done", 3*time.Minute, func(*statusJSON) bool {
			// Only a confirmed view counts (exit 0): an instance that
			// cannot reach group 0's leader (one just restarted, catching
			// up) answers from its own view, which may not have the move
			// yet, or still, and says so with exit 3.
			out, _, code := shardkit(10*time.Second, "rebalance", "status", "--format", "json", "--peer", strings.Join(c.peers, ","))
			var rs struct {
				Moves []struct {
					Bucket uint32 `json:"bucket"`
				} `json:"moves"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &rs) != nil {
				return false
			}
			for _, m := range rs.Moves {
				if m.Bucket == b {
					return false
				}
			}
			return true
		})
		clearFailpoint(t, victim, sc.failpoint) // if it never fired
		t.Logf("%s: done", what)
	}
	st = c.waitStatus("every instance Online", 2*time.Minute, func(s *statusJSON) bool { return s.count(online) == 4 })
	// A kill before the switch may hold it past the mover's SwitchTimeout:
	// that move is aborted and its bucket stays on src, which is right.
	// Either way the replicasets' own records agree with group 0's map.
	held := audit(t, c, st, 3000)
	for _, rs := range st.Replicasets {
		if held[rs.ReplicasetID] != rs.BucketCount {
			t.Errorf("%s holds %d buckets by its own records, group 0 places %d there", rs.ReplicasetID, held[rs.ReplicasetID], rs.BucketCount)
		}
	}
	if held[dst] == 0 || held[dst] > len(scenarios) {
		t.Errorf("%s holds %d buckets; want some of the %d moved", dst, held[dst], len(scenarios))
	}
	t.Logf("%d of the %d moves completed, %d were aborted before their switch", held[dst], len(scenarios), len(scenarios)-held[dst])
	n, err := cl.Count(t.Context(), "kv")
	if err != nil || n != rows {
		t.Fatalf("count %d, %v, want %d", n, err, rows)
	}
	for k := range uint64(rows) {
		r, _, err := cl.Space("kv").Select(t.Context(), []tuple.Value{tuple.Uint(k)}, client.RW)
		if v, _ := r.Tuple[1].AsUint(); err != nil || !r.Found || v != k {
			t.Fatalf("row %d after the moves: %+v, %v", k, r, err)
		}
	}
	var stopped []string
	for _, inst := range c.insts {
		if !inst.Running() {
			stopped = append(stopped, inst.Name)
		}
	}
	if len(stopped) > 0 {
		t.Fatalf("supervisors exited: %v", stopped)
	}
	// Each member's data, stopped: counts, cleanups, and the members of
	// a replicaset alike.
	c.checkData(t, 4)
}

// shardkitConfirmed runs a shardkit command again, for up to a minute,
// while it exits 3: its answer (rebalance status) was not confirmed with
// group 0's leader in time.
func shardkitConfirmed(timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	deadline := time.Now().Add(time.Minute)
	for {
		stdout, stderr, code = shardkit(timeout, args...)
		if code != 3 || time.Now().After(deadline) {
			return stdout, stderr, code
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stopRebalancer turns the rebalancer off and waits until no bucket move
// is in flight: for tests of expel and damage, whose replicasets must not
// have buckets arriving or leaving under them.
func (c *cluster) stopRebalancer(t *testing.T) {
	t.Helper()
	peers := strings.Join(c.peers, ",")
	if out, errs, code := shardkitConfirmed(30*time.Second, "rebalance", "config", "--disable", "--peer", peers); code != 0 {
		t.Fatalf("rebalance config --disable: %s %s", out, errs)
	}
	c.waitStatus("no bucket move in flight", 2*time.Minute, func(*statusJSON) bool {
		out, _, code := shardkit(10*time.Second, "rebalance", "status", "--format", "json", "--peer", peers)
		var rs struct {
			Moves []json.RawMessage `json:"moves"`
		}
		return code == 0 && json.Unmarshal([]byte(out), &rs) == nil && len(rs.Moves) == 0
	})
}
