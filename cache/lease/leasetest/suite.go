// Package leasetest is the conformance suite every lease.Store backend
// passes: SQLite, MySQL/MariaDB, PostgreSQL and the shardkit cluster's
// leases (lease.ClusterStore). A backend's test calls Run with a factory of
// stores on one shared database (or cluster).
//
// It must never assume anything of a backend beyond the lease.Store
// contract, and never assert timing: waits poll with a deadline.
package leasetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shardkit/shardkit/cache/lease"
)

// Factory returns a new Store on the one database under test: every call
// must see the same lease data (as separate server processes would), so
// that racing claimers are separate clients. Close it with t.Cleanup.
type Factory func(t *testing.T) lease.Store

// env is what one conformance test gets: its own t and the store factory.
type env struct {
	t        *testing.T
	newStore Factory
}

// waitLimit bounds every poll of the suite.
const waitLimit = 20 * time.Second

// Run runs the conformance suite as subtests of t. Each subtest uses its own
// datacenter names, so stores may share one table and subtests run in
// parallel.
func Run(t *testing.T, newStore Factory) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(e env)
	}{
		{"InitCreatesFreeShards", testInitCreatesFreeShards},
		{"InitIsIdempotentAndRefusesOtherRanges", testInitIdempotent},
		{"InitRejectsBadInput", testInitRejectsBadInput},
		{"ClaimWithoutShardsIsNotInitialized", testClaimNotInitialized},
		{"ClaimTakesDistinctShardsThenNoFreeShard", testClaimDistinct},
		{"ClaimPrefersShardHeldBefore", testClaimPrefersOwn},
		{"ExpiredLeaseIsClaimedByAnother", testExpiredClaimed},
		{"PingRenewsAndExpiredPingFails", testPingRenews},
		{"ReleaseFreesAtOnce", testRelease},
		{"WrongHolderCannotPingOrRelease", testWrongHolder},
		{"EpochOnlyGrows", testEpochGrows},
		{"ClaimRejectsBadInput", testClaimRejectsBadInput},
		{"SixClaimersRaceForThreeShards", testRace},
		{"SixKeepersRaceForThreeShards", testKeepersRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(env{t: t, newStore: newStore})
		})
	}
}

// DC returns a datacenter name no other test uses.
func DC(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random dc name: %v", err)
	}
	return "dc-" + hex.EncodeToString(b[:])
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), waitLimit+10*time.Second)
	t.Cleanup(cancel)
	return c
}

func initDC(t *testing.T, s lease.Store, n int) (string, []lease.Range) {
	t.Helper()
	dc := DC(t)
	ranges, err := lease.SplitEqual(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx(t), dc, ranges); err != nil {
		t.Fatalf("Init(%s, %d shards): %v", dc, n, err)
	}
	return dc, ranges
}

func claim(t *testing.T, s lease.Store, dc, host string, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := s.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: host, TTL: ttl})
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", dc, host, err)
	}
	if l.DC != dc || l.Host != host || l.TTL != ttl {
		t.Fatalf("Claim(%s, %s, %v) returned %v with ttl %v", dc, host, ttl, l, l.TTL)
	}
	return l
}

func rows(t *testing.T, s lease.Store, dc string) []lease.Row {
	t.Helper()
	rs, err := s.Rows(ctx(t), dc)
	if err != nil {
		t.Fatalf("Rows(%s): %v", dc, err)
	}
	return rs
}

func row(t *testing.T, s lease.Store, dc string, shard int) lease.Row {
	t.Helper()
	for _, r := range rows(t, s, dc) {
		if r.Shard == shard {
			return r
		}
	}
	t.Fatalf("dc %s has no shard %d", dc, shard)
	return lease.Row{}
}

// poll calls cond until it returns true or waitLimit passes.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const long = time.Hour

func testInitCreatesFreeShards(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, ranges := initDC(t, s, 3)
	rs := rows(t, s, dc)
	if len(rs) != 3 {
		t.Fatalf("Rows = %d rows, want 3", len(rs))
	}
	for i, r := range rs {
		if r.DC != dc || r.Shard != i || r.Range != ranges[i] || r.Host != "" || r.Epoch != 0 || !r.Expired {
			t.Errorf("row %d = %+v, want free shard %d %v epoch 0", i, r, i, ranges[i])
		}
		if !r.LastPing.IsZero() || !r.LockedTime.IsZero() {
			t.Errorf("free row %d has times %v %v", i, r.LockedTime, r.LastPing)
		}
	}
}

func testInitIdempotent(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, ranges := initDC(t, s, 2)
	l := claim(t, s, dc, "h1", long)
	if err := s.Init(ctx(t), dc, ranges); err != nil {
		t.Fatalf("second Init with the same ranges: %v", err)
	}
	if r := row(t, s, dc, l.Shard); r.Host != "h1" || r.Epoch != l.Epoch {
		t.Fatalf("second Init changed a held row: %+v", r)
	}
	other, _ := lease.SplitEqual(3)
	if err := s.Init(ctx(t), dc, other); !errors.Is(err, lease.ErrAlreadyInitialized) {
		t.Fatalf("Init with other ranges: %v, want ErrAlreadyInitialized", err)
	}
	moved := []lease.Range{{Begin: 0, End: 5}, {Begin: 5, End: 0}}
	if err := s.Init(ctx(t), dc, moved); !errors.Is(err, lease.ErrAlreadyInitialized) {
		t.Fatalf("Init with moved boundaries: %v, want ErrAlreadyInitialized", err)
	}
}

func testInitRejectsBadInput(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	tests := []struct {
		name   string
		dc     string
		ranges []lease.Range
	}{
		{"empty dc", "", []lease.Range{{}}},
		{"long dc", string(make([]byte, 65)), []lease.Range{{}}},
		{"no ranges", DC(t), nil},
		{"gap", DC(t), []lease.Range{{Begin: 0, End: 10}, {Begin: 11, End: 0}}},
		{"not to the end", DC(t), []lease.Range{{Begin: 0, End: 10}}},
	}
	for _, tc := range tests {
		if err := s.Init(ctx(t), tc.dc, tc.ranges); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: Init error %v, want ErrInvalid", tc.name, err)
		}
	}
}

func testClaimNotInitialized(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	initDC(t, s, 1) // the table exists; this dc has no rows
	dc := DC(t)
	_, err := s.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: "h", TTL: long})
	if !errors.Is(err, lease.ErrNotInitialized) {
		t.Fatalf("Claim in a dc without shards: %v, want ErrNotInitialized", err)
	}
	if _, err := s.Rows(ctx(t), dc); !errors.Is(err, lease.ErrNotInitialized) {
		t.Fatalf("Rows of a dc without shards: %v, want ErrNotInitialized", err)
	}
}

func testClaimDistinct(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, ranges := initDC(t, s, 3)
	seen := map[int]bool{}
	for i := range 3 {
		host := fmt.Sprintf("h%d", i)
		l := claim(t, s, dc, host, long)
		if seen[l.Shard] {
			t.Fatalf("shard %d claimed twice", l.Shard)
		}
		seen[l.Shard] = true
		if l.Epoch != 1 || l.Range != ranges[l.Shard] {
			t.Fatalf("first claim %v, want epoch 1 range %v", l, ranges[l.Shard])
		}
		r := row(t, s, dc, l.Shard)
		if r.Host != host || r.Epoch != 1 || r.Expired || r.TTL != long || r.LastPing.IsZero() || r.LockedTime.IsZero() {
			t.Fatalf("row after claim = %+v", r)
		}
	}
	_, err := s.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: "h3", TTL: long})
	if !errors.Is(err, lease.ErrNoFreeShard) {
		t.Fatalf("fourth claim on 3 held shards: %v, want ErrNoFreeShard", err)
	}
}

func testClaimPrefersOwn(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, _ := initDC(t, s, 3)
	first := claim(t, s, dc, "restarting", long)
	claim(t, s, dc, "other", long)
	again := claim(t, s, dc, "restarting", long)
	if again.Shard != first.Shard || again.Epoch != first.Epoch+1 {
		t.Fatalf("re-claim by the same host = %v, want shard %d epoch %d", again, first.Shard, first.Epoch+1)
	}
	if err := s.Ping(ctx(t), first); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ping of the superseded lease: %v, want ErrLost", err)
	}
	if err := s.Ping(ctx(t), again); err != nil {
		t.Fatalf("ping of the new lease: %v", err)
	}
}

func testExpiredClaimed(e env) {
	t, newStore := e.t, e.newStore
	a, b := newStore(t), newStore(t)
	dc, _ := initDC(t, a, 1)
	short := 300 * time.Millisecond
	la := claim(t, a, dc, "a", short)
	// On a slow machine a's lease may already have expired here: then this
	// first claim is the takeover.
	lb, err := b.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: "b", TTL: long})
	if err != nil && !errors.Is(err, lease.ErrNoFreeShard) {
		t.Fatalf("claim while a's lease may be live: %v", err)
	}
	poll(t, "b to claim a's expired shard", func() bool {
		if err == nil {
			return true
		}
		l, err := b.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: "b", TTL: long})
		if errors.Is(err, lease.ErrNoFreeShard) {
			return false
		}
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		lb = l
		return true
	})
	if lb.Shard != la.Shard || lb.Epoch != la.Epoch+1 {
		t.Fatalf("takeover lease %v, want shard %d epoch %d", lb, la.Shard, la.Epoch+1)
	}
	if err := a.Ping(ctx(t), la); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ping by the old holder: %v, want ErrLost", err)
	}
	if err := b.Ping(ctx(t), lb); err != nil {
		t.Fatalf("ping by the new holder: %v", err)
	}
}

func testPingRenews(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, _ := initDC(t, s, 1)
	l := claim(t, s, dc, "a", long)
	before := row(t, s, dc, l.Shard).LastPing
	poll(t, "a ping to move last_ping forward", func() bool {
		if err := s.Ping(ctx(t), l); err != nil {
			t.Fatalf("ping: %v", err)
		}
		return row(t, s, dc, l.Shard).LastPing.After(before)
	})
	if r := row(t, s, dc, l.Shard); r.Epoch != l.Epoch || r.Host != "a" || r.Expired {
		t.Fatalf("ping changed the holding: %+v", r)
	}

	short := 200 * time.Millisecond
	dc2, _ := initDC(t, s, 1)
	ls := claim(t, s, dc2, "a", short)
	poll(t, "the short lease to expire", func() bool { return row(t, s, dc2, ls.Shard).Expired })
	if err := s.Ping(ctx(t), ls); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ping of an expired lease nobody took: %v, want ErrLost", err)
	}
}

func testRelease(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, _ := initDC(t, s, 1)
	la := claim(t, s, dc, "a", long)
	if err := s.Release(ctx(t), la); err != nil {
		t.Fatalf("release: %v", err)
	}
	if r := row(t, s, dc, la.Shard); r.Host != "" || !r.Expired || r.Epoch != la.Epoch {
		t.Fatalf("row after release = %+v, want free at epoch %d", r, la.Epoch)
	}
	lb := claim(t, s, dc, "b", long)
	if lb.Epoch != la.Epoch+1 {
		t.Fatalf("claim after release: epoch %d, want %d", lb.Epoch, la.Epoch+1)
	}
	if err := s.Release(ctx(t), la); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("second release: %v, want ErrLost", err)
	}
	if err := s.Ping(ctx(t), la); !errors.Is(err, lease.ErrLost) {
		t.Fatalf("ping after release: %v, want ErrLost", err)
	}
}

func testWrongHolder(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, _ := initDC(t, s, 2)
	l := claim(t, s, dc, "a", long)
	forged := []lease.Lease{l, l, l}
	forged[0].Host = "b"
	forged[1].Epoch = l.Epoch + 1
	forged[2].Shard = 1 - l.Shard
	for _, f := range forged {
		if err := s.Ping(ctx(t), f); !errors.Is(err, lease.ErrLost) {
			t.Errorf("ping of %v: %v, want ErrLost", f, err)
		}
		if err := s.Release(ctx(t), f); !errors.Is(err, lease.ErrLost) {
			t.Errorf("release of %v: %v, want ErrLost", f, err)
		}
	}
	if r := row(t, s, dc, l.Shard); r.Host != "a" || r.Epoch != l.Epoch || r.Expired {
		t.Fatalf("forged calls changed the row: %+v", r)
	}
}

func testEpochGrows(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, _ := initDC(t, s, 1)
	var last uint64
	for i := range 5 {
		l := claim(t, s, dc, fmt.Sprintf("h%d", i%2), long)
		if l.Epoch <= last {
			t.Fatalf("claim %d: epoch %d after %d", i, l.Epoch, last)
		}
		last = l.Epoch
		if _, err := s.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: "other", TTL: long}); !errors.Is(err, lease.ErrNoFreeShard) {
			t.Fatalf("claim of a held shard: %v, want ErrNoFreeShard", err)
		}
		if r := row(t, s, dc, 0); r.Epoch != last {
			t.Fatalf("row epoch %d, want %d", r.Epoch, last)
		}
		if i%2 == 0 {
			if err := s.Release(ctx(t), l); err != nil {
				t.Fatalf("release: %v", err)
			}
		} else {
			// The same host claims again: its own shard, a new epoch.
			again := claim(t, s, dc, l.Host, long)
			if again.Epoch != l.Epoch+1 {
				t.Fatalf("re-claim epoch %d, want %d", again.Epoch, l.Epoch+1)
			}
			last = again.Epoch
			if err := s.Release(ctx(t), again); err != nil {
				t.Fatalf("release: %v", err)
			}
		}
	}
}

func testClaimRejectsBadInput(e env) {
	t, newStore := e.t, e.newStore
	s := newStore(t)
	dc, _ := initDC(t, s, 1)
	bad := []lease.ClaimRequest{
		{DC: "", Host: "h", TTL: long},
		{DC: dc, Host: "", TTL: long},
		{DC: dc, Host: "h", TTL: 0},
		{DC: dc, Host: "h", TTL: -time.Second},
		{DC: dc, Host: string(make([]byte, 256)), TTL: long},
	}
	for _, req := range bad {
		if _, err := s.Claim(ctx(t), req); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("Claim(%+v): %v, want ErrInvalid", req, err)
		}
	}
	if err := s.Ping(ctx(t), lease.Lease{DC: dc, Shard: -1, Host: "h", TTL: long}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Ping of shard -1: %v, want ErrInvalid", err)
	}
	if r := row(t, s, dc, 0); r.Host != "" || r.Epoch != 0 {
		t.Fatalf("bad claims changed the row: %+v", r)
	}
}

// testRace: six separate clients claim at once in a dc of three shards;
// each shard ends up held exactly once and the rest are told no shard is
// free.
func testRace(e env) {
	t, newStore := e.t, e.newStore
	setup := newStore(t)
	dc, _ := initDC(t, setup, 3)
	stores := make([]lease.Store, 6)
	for i := range stores {
		stores[i] = newStore(t)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases []lease.Lease
		noFree int
		errs   []error
	)
	start := make(chan struct{})
	for i, s := range stores {
		wg.Go(func() {
			<-start
			l, err := s.Claim(ctx(t), lease.ClaimRequest{DC: dc, Host: fmt.Sprintf("racer%d", i), TTL: long})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				leases = append(leases, l)
			case errors.Is(err, lease.ErrNoFreeShard):
				noFree++
			default:
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("racing claims failed: %v", errs)
	}
	if len(leases) != 3 || noFree != 3 {
		t.Fatalf("%d claims won and %d were refused, want 3 and 3: %v", len(leases), noFree, leases)
	}
	checkHeldOnce(t, setup, dc, leases)
}

func checkHeldOnce(t *testing.T, s lease.Store, dc string, leases []lease.Lease) {
	t.Helper()
	byShard := map[int]lease.Lease{}
	for _, l := range leases {
		if prev, dup := byShard[l.Shard]; dup {
			t.Fatalf("shard %d held twice: %v and %v", l.Shard, prev, l)
		}
		byShard[l.Shard] = l
	}
	for _, r := range rows(t, s, dc) {
		l, ok := byShard[r.Shard]
		if !ok || r.Host != l.Host || r.Epoch != l.Epoch || r.Expired {
			t.Fatalf("row %+v does not match the winning lease %v", r, l)
		}
	}
}

// testKeepersRace: six keepers (as six servers would) race for three
// shards; three hold one shard each and the others keep waiting.
func testKeepersRace(e env) {
	t, newStore := e.t, e.newStore
	setup := newStore(t)
	dc, _ := initDC(t, setup, 3)
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	type result struct {
		k   *lease.Keeper
		err error
	}
	results := make(chan result, 6)
	for i := range 6 {
		s := newStore(t)
		go func() {
			k, err := lease.Acquire(c, lease.KeeperConfig{
				Store: s, DC: dc, Host: fmt.Sprintf("server%d", i), TTL: long, ClaimRetry: 10 * time.Millisecond,
			})
			results <- result{k, err}
		}()
	}
	var leases []lease.Lease
	for range 3 {
		r := <-results
		if r.err != nil {
			t.Fatalf("Acquire: %v", r.err)
		}
		l, ok := r.k.Current()
		if !ok {
			t.Fatalf("fresh keeper %v is not current", l)
		}
		leases = append(leases, l)
	}
	checkHeldOnce(t, setup, dc, leases)
	cancel() // the three waiting keepers give up
	for range 3 {
		r := <-results
		if r.err == nil {
			l, _ := r.k.Current()
			t.Fatalf("a fourth keeper got a lease %v on three held shards", l)
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("waiting keeper ended with %v, want context.Canceled", r.err)
		}
	}
}
