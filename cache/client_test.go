package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/shardkit/shardkit/cache"
	"github.com/shardkit/shardkit/cache/internal/kvpb"
)

func TestGetHealthySendsEachShardToEveryReplica(t *testing.T) {
	t.Parallel()
	g, hl := grid(t, "dc1", "dc2")
	reg := prometheus.NewRegistry()
	c := newClient(t, hl, reg, nil)
	ks := keys(0, 3)
	got, err := c.Get(getCtx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	checkValues(t, got, ks)
	for _, dc := range g {
		for _, f := range dc {
			if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"host": f.addr, "kind": "get"}); n != 1 {
				t.Errorf("client sent %v gets to %s %v, want 1 (every replica)", n, f.dc, f.shard)
			}
		}
	}
	if n := metric(t, reg, "shardkit_cache_client_logical_shard_requests_total", nil); n != 2 {
		t.Errorf("logical shard requests %v, want 2", n)
	}
}

func TestGetEmptyAndDuplicateKeys(t *testing.T) {
	t.Parallel()
	_, hl := grid(t, "dc1")
	reg := prometheus.NewRegistry()
	c := newClient(t, hl, reg, nil)
	got, err := c.Get(getCtx(t, 10*time.Second), nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("Get(nil) = %v, %v", got, err)
	}
	if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"kind": "get"}); n != 0 {
		t.Fatalf("Get(nil) sent %v requests", n)
	}
	k := &kvpb.Key{ShardingKey: 5, Id: 42}
	got, err = c.Get(getCtx(t, 10*time.Second), []*kvpb.Key{k, k, k})
	if err != nil || len(got) != 1 || got[42] != value(42) {
		t.Fatalf("Get of a thrice repeated key = %v, %v", got, err)
	}
}

// A replica that misbehaves alone loses its keys with a named cause; with a
// healthy replica in another DC, every Get succeeds.
func TestGetMisbehavingReplica(t *testing.T) {
	t.Parallel()
	moved := shard1
	moved.Epoch = 2
	tests := []struct {
		name     string
		b        behaviour
		unrouted bool // the sole holder's keys end with no known shard
		wantErr  error
	}{
		{"failing", behaviour{failGets: codes.Unavailable}, false, nil},
		{"internal error", behaviour{failGets: codes.Internal}, false, nil},
		{"refusing without lease", behaviour{noLease: true}, true, nil},
		{"wrong shard", behaviour{answerFrom: &moved}, true, nil},
		{"empty answer", behaviour{empty: true}, false, cache.ErrBadAnswer},
	}
	for _, tc := range tests {
		t.Run(tc.name+"/alone", func(t *testing.T) {
			t.Parallel()
			f := startServer(t, "dc1", shard0)
			hl := &hostList{}
			hl.add(f)
			c := newClient(t, hl, nil, func(o *cache.Options) { o.MaxAttempts = 3 })
			f.set(tc.b)
			k := &kvpb.Key{ShardingKey: 7, Id: 7}
			// Long enough for three attempts with backoff on a loaded machine.
			_, err := c.Get(getCtx(t, 2*time.Second), []*kvpb.Key{k})
			var mk *cache.MissingKeysError[uint64]
			if !errors.Is(err, cache.ErrMissingKeys) || !errors.As(err, &mk) {
				t.Fatalf("Get = %v, want a MissingKeysError", err)
			}
			if len(mk.IDs) != 1 || mk.IDs[0] != 7 {
				t.Fatalf("missing ids %v, want [7]", mk.IDs)
			}
			if cause := mk.Causes[f.addr]; cause == nil {
				t.Fatalf("no cause for %s in %v", f.addr, err)
			} else if tc.wantErr != nil && !errors.Is(cause, tc.wantErr) {
				t.Fatalf("cause %v, want %v", cause, tc.wantErr)
			}
			if tc.unrouted != (len(mk.Unrouted) == 1) {
				t.Fatalf("unrouted %v, want unrouted=%v", mk.Unrouted, tc.unrouted)
			}
			if tc.b.failGets == codes.Unavailable && f.failed.Load() != 3 {
				t.Fatalf("a retryable failure was tried %d times, want MaxAttempts=3", f.failed.Load())
			}
			if tc.b.failGets == codes.Internal && f.failed.Load() != 1 {
				t.Fatalf("a non-retryable failure was tried %d times, want 1", f.failed.Load())
			}
		})
		t.Run(tc.name+"/with a healthy replica", func(t *testing.T) {
			t.Parallel()
			g, hl := grid(t, "dc1", "dc2")
			c := newClient(t, hl, nil, nil)
			g[0][0].set(tc.b)
			g[1][1].set(tc.b)
			for i := range 5 {
				ks := keys(uint64(i*10), 4)
				got, err := c.Get(getCtx(t, 10*time.Second), ks)
				if err != nil {
					t.Fatalf("Get %d: %v", i, err)
				}
				checkValues(t, got, ks)
			}
		})
	}
}

func TestGetSlowReplicaIsCancelled(t *testing.T) {
	t.Parallel()
	g, hl := grid(t, "dc1", "dc2")
	c := newClient(t, hl, nil, func(o *cache.Options) { o.HostTimeout = time.Hour })
	slow := g[1][0]
	slow.set(behaviour{getDelay: time.Hour})
	// The fast replica answers only once the slow one's handler runs: a Get
	// that finished before the slow request reached its server would cancel
	// a request no handler saw, and nothing could observe the cancel.
	g[0][0].set(behaviour{after: slow})
	ks := keys(0, 2)
	got, err := c.Get(getCtx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	checkValues(t, got, ks)
	poll(t, "the slow replica's request to be cancelled", func() bool { return slow.cancelled.Load() == 1 })
}

func TestGetRetriesOneHost(t *testing.T) {
	t.Parallel()
	f := startServer(t, "dc1", cache.Shard{Begin: 0, End: 0, Epoch: 1})
	hl := &hostList{}
	hl.add(f)
	c := newClient(t, hl, nil, func(o *cache.Options) { o.MaxAttempts = 3 })
	f.set(behaviour{failGets: codes.Unavailable, failFirst: 2})
	ks := keys(0, 2)
	got, err := c.Get(getCtx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("Get after two transient failures: %v", err)
	}
	checkValues(t, got, ks)
	if n := f.gets.Load(); n != 3 {
		t.Fatalf("server saw %d gets, want 3 (two failures, one retry that worked)", n)
	}
}

func TestGetFollowsNewerEpochsOnly(t *testing.T) {
	t.Parallel()
	old := startServer(t, "dc1", cache.Shard{Begin: 0, End: 0, Epoch: 3})
	cur := startServer(t, "dc1", cache.Shard{Begin: 0, End: 0, Epoch: 5})
	otherDC := startServer(t, "dc2", cache.Shard{Begin: 0, End: 0, Epoch: 1})
	hl := &hostList{}
	hl.add(old, cur, otherDC)
	reg := prometheus.NewRegistry()
	c := newClient(t, hl, reg, nil)
	for i := range 5 {
		ks := keys(uint64(i*10), 2)
		got, err := c.Get(getCtx(t, 10*time.Second), ks)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		checkValues(t, got, ks)
	}
	if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"host": old.addr, "kind": "get"}); n != 0 {
		t.Fatalf("the epoch-3 holder got %v gets after epoch 5 was seen", n)
	}
	if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"host": cur.addr, "kind": "get"}); n != 5 {
		t.Fatalf("the epoch-5 holder got %v gets, want 5", n)
	}
	// The old host takes the shard back at a newer epoch, the other refuses:
	// a client learns epoch 6 and asks the old host again.
	old.setShard(cache.Shard{Begin: 0, End: 0, Epoch: 6})
	cur.set(behaviour{noLease: true})
	r2 := prometheus.NewRegistry()
	c2 := newClient(t, hl, r2, nil)
	ks := keys(100, 2)
	got, err := c2.Get(getCtx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	checkValues(t, got, ks)
	if n := metric(t, r2, "shardkit_cache_client_requests_total", map[string]string{"host": old.addr, "kind": "get"}); n != 1 {
		t.Fatalf("the epoch-6 holder got %v gets, want 1", n)
	}
	if n := metric(t, r2, "shardkit_cache_client_requests_total", map[string]string{"host": cur.addr, "kind": "get"}); n != 0 {
		t.Fatalf("the host without a lease got %v gets", n)
	}
}

// A host whose pings claim the current epoch but whose Gets answer from an
// older one (its lease moved on while it still served): its values are
// never used, and the keys go to the holder of the current epoch.
func TestGetRefusesAnswersAtAnOlderEpoch(t *testing.T) {
	t.Parallel()
	whole := cache.Shard{Begin: 0, End: 0, Epoch: 5}
	older := cache.Shard{Begin: 0, End: 0, Epoch: 3}

	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		f := startServer(t, "dc1", whole)
		f.set(behaviour{staleGets: &older})
		hl := &hostList{}
		hl.add(f)
		c := newClient(t, hl, nil, nil)
		k := &kvpb.Key{ShardingKey: 7, Id: 7}
		// Long enough for the first ping on a loaded machine; the Get then
		// waits for the rest of it for a holder that never comes.
		got, err := c.Get(getCtx(t, 3*time.Second), []*kvpb.Key{k})
		if len(got) != 0 {
			t.Fatalf("Get used the epoch-3 answer: %v", got)
		}
		var mk *cache.MissingKeysError[uint64]
		if !errors.As(err, &mk) {
			t.Fatalf("Get = %v, want a MissingKeysError", err)
		}
		if cause := mk.Causes[f.addr]; !errors.Is(cause, cache.ErrBadAnswer) {
			t.Fatalf("cause %v, want ErrBadAnswer", cause)
		}
		if f.gets.Load() != 1 {
			t.Fatalf("the stale host got %d gets, want 1", f.gets.Load())
		}
	})

	t.Run("with the current holder", func(t *testing.T) {
		t.Parallel()
		stale := startServer(t, "dc1", whole)
		stale.set(behaviour{staleGets: &older})
		cur := startServer(t, "dc1", whole)
		hl := &hostList{}
		hl.add(stale, cur)
		c := newClient(t, hl, nil, nil)
		// Both are asked (send-to-all) once both are known; whichever
		// answers first, only the epoch-5 answer counts.
		deadline := time.Now().Add(20 * time.Second)
		for i := 0; stale.gets.Load() == 0 || i < 3; i++ {
			if time.Now().After(deadline) {
				t.Fatal("the stale host was never asked: the test proves nothing")
			}
			ks := keys(uint64(i*10), 4)
			got, err := c.Get(getCtx(t, 10*time.Second), ks)
			if err != nil {
				t.Fatalf("Get %d: %v", i, err)
			}
			checkValues(t, got, ks)
		}
	})
}

func TestGetDatacenterGone(t *testing.T) {
	t.Parallel()
	g, hl := grid(t, "dc1", "dc2")
	// The stopped servers refuse connections at once; the timeout only
	// bounds a live server that is slow under load.
	c := newClient(t, hl, nil, func(o *cache.Options) { o.HostTimeout = 2 * time.Second })
	for _, f := range g[1] {
		f.srv.Stop()
	}
	for i := range 10 {
		ks := keys(uint64(i*10), 3)
		got, err := c.Get(getCtx(t, 10*time.Second), ks)
		if err != nil {
			t.Fatalf("Get %d with dc2 gone: %v", i, err)
		}
		checkValues(t, got, ks)
	}
}

func TestGetWaitsForAShard(t *testing.T) {
	t.Parallel()
	f0 := startServer(t, "dc1", shard0)
	hl := &hostList{}
	hl.add(f0)
	c := newClient(t, hl, nil, func(o *cache.Options) { o.PingPeriod = 20 * time.Millisecond })
	ks := keys(0, 2) // half of them in shard1, which nobody holds yet
	var in1 []*kvpb.Key
	for _, k := range ks {
		if k.GetShardingKey() > half {
			in1 = append(in1, k)
		}
	}
	_, err := c.Get(getCtx(t, 100*time.Millisecond), in1)
	var mk *cache.MissingKeysError[uint64]
	if !errors.As(err, &mk) || len(mk.Unrouted) != 2 || len(mk.IDs) != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get of shard1 keys with shard1 unheld = %v, want 2 unrouted ids and the deadline", err)
	}
	done := make(chan error, 1)
	var got map[uint64]string
	go func() {
		var err error
		got, err = c.Get(getCtx(t, 20*time.Second), ks)
		done <- err
	}()
	hl.add(startServer(t, "dc1", shard1)) // appears while Get waits
	if err := <-done; err != nil {
		t.Fatalf("Get while shard1's server appears: %v", err)
	}
	checkValues(t, got, ks)
}

func TestGetRoutesAfterWrongShardAnswer(t *testing.T) {
	t.Parallel()
	a := startServer(t, "dc1", shard0)
	b := startServer(t, "dc1", shard1)
	hl := &hostList{}
	hl.add(a, b)
	reg := prometheus.NewRegistry()
	// No periodic pings: they could learn a's move before the Get asks a.
	// A waiting Get kicks a refresh of its own.
	c := newClient(t, hl, reg, nil)
	// a moves to shard1 at a newer epoch (b lost it); nobody has shard0.
	moved := cache.Shard{Begin: half, End: 0, Epoch: 2}
	a.setShard(moved)
	b.set(behaviour{noLease: true})
	k0 := &kvpb.Key{ShardingKey: 1, Id: 1}
	k1 := &kvpb.Key{ShardingKey: half + 1, Id: 2}
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(getCtx(t, 20*time.Second), []*kvpb.Key{k0})
		done <- err
	}()
	poll(t, "a's wrong-shard answer", func() bool {
		return metric(t, reg, "shardkit_cache_client_answers_total", map[string]string{"host": a.addr, "use": "wrong_shard"}) >= 1
	})
	got, err := c.Get(getCtx(t, 10*time.Second), []*kvpb.Key{k1})
	if err != nil || got[2] != value(2) {
		t.Fatalf("Get of a shard1 key after a moved: %v %v", got, err)
	}
	hl.add(startServer(t, "dc2", shard0))
	if err := <-done; err != nil {
		t.Fatalf("Get of the shard0 key once dc2 holds shard0: %v", err)
	}
}

func TestHedgeAsksNearestReplicaOnly(t *testing.T) {
	t.Parallel()
	_, hl := grid(t, "dc1", "dc2")
	reg := prometheus.NewRegistry()
	c := newClient(t, hl, reg, func(o *cache.Options) { o.HedgeDelay = time.Hour })
	for i := range 20 {
		ks := keys(uint64(i*10), 3)
		got, err := c.Get(getCtx(t, 10*time.Second), ks)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		checkValues(t, got, ks)
	}
	if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"kind": "get"}); n != 40 {
		t.Fatalf("%v get requests for 20 Gets over 2 shards, want 40 (one replica each)", n)
	}
	if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"kind": "hedge"}); n != 0 {
		t.Fatalf("%v hedges with a one-hour hedge delay", n)
	}
}

func TestHedgeFailsOverAtOnceAndHedgesSlowPrimary(t *testing.T) {
	t.Parallel()
	whole := cache.Shard{Begin: 0, End: 0, Epoch: 1}
	tests := []struct {
		name    string
		primary behaviour
		hedge   time.Duration
		kind    string // how the backup was asked
	}{
		// The hedge delay is far beyond the Get's deadline: only an
		// immediate failover can succeed.
		{"failing primary", behaviour{failGets: codes.Unavailable}, time.Hour, "get"},
		{"slow primary", behaviour{getDelay: time.Hour}, 20 * time.Millisecond, "hedge"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			primary := startServer(t, "dc1", whole)
			backup := startServer(t, "dc2", whole)
			backup.set(behaviour{delay: 500 * time.Millisecond}) // slower pings: never first choice
			hl := &hostList{}
			hl.add(primary, backup)
			reg := prometheus.NewRegistry()
			c := newClient(t, hl, reg, func(o *cache.Options) {
				o.HedgeDelay, o.MaxAttempts, o.HostTimeout = tc.hedge, 1, time.Hour
			})
			primary.set(tc.primary)
			ks := keys(0, 2)
			got, err := c.Get(getCtx(t, 10*time.Second), ks)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			checkValues(t, got, ks)
			if primary.gets.Load() != 1 {
				t.Fatalf("primary saw %d gets, want 1", primary.gets.Load())
			}
			if n := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"host": backup.addr, "kind": tc.kind}); n != 1 {
				t.Fatalf("backup got %v requests of kind %s, want 1", n, tc.kind)
			}
		})
	}
}

func TestEjectionSkipsFailingHost(t *testing.T) {
	t.Parallel()
	g, hl := grid(t, "dc1", "dc2")
	reg := prometheus.NewRegistry()
	// An ejection that outlasts the test: only the last-replica rule may
	// bring the host back.
	c := newClient(t, hl, reg, func(o *cache.Options) { o.EjectAfter, o.MaxAttempts, o.EjectBase = 2, 1, time.Hour })
	bad := g[0][0]
	bad.set(behaviour{failGets: codes.Unavailable})
	// Send-to-all: bad is asked by every Get until ejected after 2
	// consecutive failures (its answers may lose the race, so wait for them).
	poll(t, "the failing host's ejection", func() bool {
		if _, err := c.Get(getCtx(t, 10*time.Second), keys(0, 1)); err != nil {
			t.Fatalf("Get: %v", err)
		}
		return metric(t, reg, "shardkit_cache_client_ejections_total", map[string]string{"host": bad.addr}) == 1
	})
	before := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"host": bad.addr})
	for i := range 10 {
		ks := keys(uint64(i*10), 2)
		if _, err := c.Get(getCtx(t, 10*time.Second), ks); err != nil {
			t.Fatalf("Get: %v", err)
		}
	}
	if after := metric(t, reg, "shardkit_cache_client_requests_total", map[string]string{"host": bad.addr}); after != before {
		t.Fatalf("an ejected host got %v more requests", after-before)
	}
	// With its replica gone, the ejected host is asked again.
	g[1][0].srv.Stop()
	bad.set(behaviour{})
	poll(t, "the ejected host to serve as the last replica", func() bool {
		_, err := c.Get(getCtx(t, 10*time.Second), keys(500, 1))
		return err == nil
	})
}

func TestClientRejectsBadConfiguration(t *testing.T) {
	t.Parallel()
	good := kvDesc()
	hl := &hostList{}
	noMethod := good
	noMethod.Method = "Get"
	noFuncs := good
	noFuncs.Deserialize, noFuncs.EntryID = nil, nil
	tests := []struct {
		name string
		desc cache.Description[*kvpb.Key, uint64, string, *kvpb.GetRequest, *kvpb.GetResponse]
		opts cache.Options
	}{
		{"no resolver", good, cache.Options{}},
		{"bad method", noMethod, cache.Options{Resolver: hl}},
		{"missing functions", noFuncs, cache.Options{Resolver: hl}},
		{"negative hedge", good, cache.Options{Resolver: hl, HedgeDelay: -1}},
		{"too many attempts", good, cache.Options{Resolver: hl, MaxAttempts: 9}},
		{"bad budget", good, cache.Options{Resolver: hl, BudgetRatio: 2}},
	}
	for _, tc := range tests {
		if _, err := cache.New(t.Context(), tc.desc, tc.opts); !errors.Is(err, cache.ErrInvalid) {
			t.Errorf("%s: New error %v, want ErrInvalid", tc.name, err)
		}
	}
	c := newClient(t, hl, nil, nil)
	c.Close()
	if _, err := c.Get(t.Context(), keys(0, 1)); !errors.Is(err, cache.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
}

func TestHostWithoutLeaseIsNotEjected(t *testing.T) {
	t.Parallel()
	f := startServer(t, "dc1", cache.Shard{Begin: 0, End: 0, Epoch: 1})
	f.set(behaviour{noLease: true}) // a spare server: refuses every ping
	hl := &hostList{}
	hl.add(f)
	reg := prometheus.NewRegistry()
	c := newClient(t, hl, reg, func(o *cache.Options) { o.EjectAfter, o.PingPeriod = 1, 5*time.Millisecond })
	poll(t, "five refused pings", func() bool { return f.pings.Load() >= 5 })
	if n := metric(t, reg, "shardkit_cache_client_ejections_total", nil); n != 0 {
		t.Fatalf("a host without a lease was ejected %v times", n)
	}
	f.set(behaviour{}) // it gets a lease
	ks := keys(0, 2)
	got, err := c.Get(getCtx(t, 10*time.Second), ks)
	if err != nil {
		t.Fatalf("Get once the host holds a lease: %v", err)
	}
	checkValues(t, got, ks)
}
