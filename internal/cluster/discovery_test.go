package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
)

// fakeNet connects discovery instances by address; some addresses may be
// down, and calls take a random short time so that runs interleave.
type fakeNet struct {
	mu    sync.Mutex
	nodes map[string]*discovery
	rng   *rand.Rand
}

func (n *fakeNet) call(ctx context.Context, addr string, req *clusterv1.DiscoverRequest) (*clusterv1.DiscoverResponse, error) {
	n.mu.Lock()
	d := n.nodes[addr]
	delay := time.Duration(n.rng.IntN(300)) * time.Microsecond
	n.mu.Unlock()
	time.Sleep(delay)
	if d == nil {
		return nil, errors.New("connection refused")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.handle(req), nil
}

// TestDiscoveryElectsExactlyOneBootstrapLeader starts N instances at once
// with the same peer list, many times, and checks that exactly one decides
// to bootstrap and that every other one learns its address.
func TestDiscoveryElectsExactlyOneBootstrapLeader(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 5} {
		for run := range 30 {
			net := &fakeNet{nodes: map[string]*discovery{}, rng: rand.New(rand.NewPCG(uint64(n), uint64(run)))}
			var addrs []string
			for i := range n {
				addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", 4000+i))
			}
			peers := addrs[:min(3, n)]
			for _, a := range addrs {
				net.nodes[a] = newDiscovery(a, peers)
			}
			results := make([]discoveryResult, n)
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			for i, a := range addrs {
				wg.Go(func() {
					r, err := net.nodes[a].run(ctx, net.call, time.Millisecond, 2*time.Second)
					if err != nil {
						t.Errorf("n=%d run=%d: %s: %v", n, run, a, err)
					}
					results[i] = r
				})
			}
			wg.Wait()
			cancel()
			leaders := 0
			var leader string
			for i, r := range results {
				if r.bootstrap {
					leaders++
					leader = addrs[i]
				}
			}
			if leaders != 1 {
				t.Fatalf("n=%d run=%d: %d instances bootstrap: %+v", n, run, leaders, results)
			}
			for i, r := range results {
				if !r.bootstrap && r.leader != leader {
					t.Fatalf("n=%d run=%d: %s follows %q, the bootstrap leader is %s", n, run, addrs[i], r.leader, leader)
				}
			}
		}
	}
}

// A new instance whose first peer is dead joins through the live one.
func TestDiscoveryJoinsRunningClusterPastADeadPeer(t *testing.T) {
	t.Parallel()
	net := &fakeNet{nodes: map[string]*discovery{}, rng: rand.New(rand.NewPCG(1, 2))}
	running := newDiscovery("127.0.0.1:5001", nil)
	running.decide(discoveryResult{leader: "127.0.0.1:5009"}) // in a cluster led by :5009
	net.nodes["127.0.0.1:5001"] = running
	joiner := newDiscovery("127.0.0.1:5002", []string{"127.0.0.1:5000", "127.0.0.1:5001"})
	net.nodes["127.0.0.1:5002"] = joiner
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := joiner.run(ctx, net.call, time.Millisecond, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.bootstrap || r.leader != "127.0.0.1:5009" {
		t.Fatalf("joiner result %+v, want to follow 127.0.0.1:5009", r)
	}
}

// An instance reached under an alias learns that alias as its own.
func TestDiscoveryLearnsOwnAliases(t *testing.T) {
	t.Parallel()
	d := newDiscovery("10.0.0.1:3301", []string{"localhost:3301"})
	d.handle(&clusterv1.DiscoverRequest{TmpId: d.tmpID, RequestTo: "localhost:3301"})
	if !d.myAddrs["localhost:3301"] {
		t.Fatal("alias not learned from a request carrying the instance's own id")
	}
	d.handle(&clusterv1.DiscoverRequest{TmpId: "someone-else", RequestTo: "other:1"})
	if d.myAddrs["other:1"] {
		t.Fatal("learned an address from another instance's request")
	}
}

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// logRecorder keeps the messages and attributes of warnings.
type logRecorder struct {
	mu    sync.Mutex
	warns []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level < slog.LevelWarn {
		return nil
	}
	line := rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	r.mu.Lock()
	r.warns = append(r.warns, line)
	r.mu.Unlock()
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.warns)
}

// A peer that never answers keeps discovery waiting (it must: it may be
// an instance still starting), but no longer silently: waitingFor names
// it with how long it has been silent and why, and a warning says so
// every discoveryWarnEvery.
func TestDiscoveryNamesThePeersItWaitsFor(t *testing.T) {
	t.Parallel()
	net := &fakeNet{nodes: map[string]*discovery{}, rng: rand.New(rand.NewPCG(3, 4))}
	self, dead := "127.0.0.1:6001", "127.0.0.1:3399"
	d := newDiscovery(self, []string{self, dead})
	net.nodes[self] = d
	clock := &testClock{now: time.Unix(1000, 0)}
	rec := &logRecorder{}
	d.clock, d.log = clock, slog.New(rec)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := d.run(ctx, net.call, time.Millisecond, 2*time.Second)
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("discovery ended with %v, want context.Canceled", err)
		}
	}()

	waitForCond(t, 10*time.Second, "the dead peer listed as silent", func() bool {
		w := d.waitingFor()
		return len(w) == 1 && w[0].Address == dead && w[0].Why == "connection refused"
	})
	if len(rec.all()) != 0 {
		t.Fatalf("warned before the peer was silent for %v: %q", discoveryWarnEvery, rec.all())
	}
	clock.advance(discoveryWarnEvery + 2*time.Second)
	waitForCond(t, 10*time.Second, "a warning naming the dead peer", func() bool {
		for _, w := range rec.all() {
			if strings.Contains(w, dead+" for 12s (connection refused)") {
				return true
			}
		}
		return false
	})
	if w := d.waitingFor(); len(w) != 1 || w[0].For != discoveryWarnEvery+2*time.Second {
		t.Fatalf("waitingFor %v; want %s silent for %v", w, dead, discoveryWarnEvery+2*time.Second)
	}
	// No second warning until the period has passed again.
	n := len(rec.all())
	time.Sleep(20 * time.Millisecond) // rounds go on (1 ms apart)
	if got := len(rec.all()); got != n {
		t.Fatalf("%d warnings within one period: %q", got, rec.all())
	}
	select {
	case err := <-done:
		done <- err // for the deferred wait
		t.Fatalf("discovery ended with a peer that never answered: %v", err)
	default:
	}
}

func waitForCond(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}
