package lease

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// scriptedStore answers Claim with a fixed lease and Ping with pingErr.
type scriptedStore struct {
	mu        sync.Mutex
	pingErr   error
	pings     int
	released  []Lease
	claimErrs []error // returned by successive Claims before succeeding
}

func (s *scriptedStore) Init(context.Context, string, []Range) error { return nil }

func (s *scriptedStore) Claim(_ context.Context, req ClaimRequest) (Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.claimErrs) > 0 {
		err := s.claimErrs[0]
		s.claimErrs = s.claimErrs[1:]
		return Lease{}, err
	}
	return Lease{DC: req.DC, Shard: 1, Range: Range{10, 20}, Host: req.Host, Epoch: 7, TTL: req.TTL}, nil
}

func (s *scriptedStore) Ping(context.Context, Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pings++
	return s.pingErr
}

func (s *scriptedStore) setPingErr(err error) {
	s.mu.Lock()
	s.pingErr = err
	s.mu.Unlock()
}

func (s *scriptedStore) Release(_ context.Context, l Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, l)
	return nil
}

func (s *scriptedStore) Rows(context.Context, string) ([]Row, error) { return nil, nil }
func (s *scriptedStore) Close() error                                { return nil }

func newTestKeeper(t *testing.T, store *scriptedStore, clock *fakeClock, onLost func(Lease, error)) *Keeper {
	t.Helper()
	k, err := Acquire(t.Context(), KeeperConfig{
		Store: store, DC: "dc1", Host: "h1", TTL: 10 * time.Second, PingPeriod: time.Second,
		Margin: 2 * time.Second, ClaimRetry: time.Millisecond, Clock: clock, OnLost: onLost,
	})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return k
}

func TestKeeperStopsAnsweringBeforeExpiry(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	store := &scriptedStore{}
	k := newTestKeeper(t, store, clock, nil)
	if l, ok := k.Current(); !ok || l.Epoch != 7 {
		t.Fatalf("fresh keeper: %v %v", l, ok)
	}
	clock.advance(7999 * time.Millisecond)
	if _, ok := k.Current(); !ok {
		t.Fatalf("not current before TTL - margin")
	}
	clock.advance(time.Millisecond) // TTL - margin after the claim was sent
	if _, ok := k.Current(); ok {
		t.Fatalf("still current at TTL - margin without a ping")
	}
	// A ping sent now (still within the TTL) succeeds: current again, with a
	// deadline from this ping's send time.
	if err := k.pingOnce(t.Context()); err != nil {
		t.Fatalf("pingOnce: %v", err)
	}
	if _, ok := k.Current(); !ok {
		t.Fatalf("not current after a successful ping")
	}
	if want := clock.Now().Add(8 * time.Second); !k.Deadline().Equal(want) {
		t.Fatalf("deadline %v, want %v", k.Deadline(), want)
	}
}

func TestKeeperTransientPingErrorsKeepLeaseUntilDeadline(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	store := &scriptedStore{pingErr: errors.New("connection refused")}
	var lost []error
	k := newTestKeeper(t, store, clock, func(_ Lease, err error) { lost = append(lost, err) })
	for range 7 {
		clock.advance(time.Second)
		if err := k.pingOnce(t.Context()); err != nil {
			t.Fatalf("transient ping error reported as lost: %v", err)
		}
		if _, ok := k.Current(); !ok {
			t.Fatalf("lease dropped at %v before its deadline", clock.Now())
		}
	}
	clock.advance(time.Second) // 8s: deadline
	if _, ok := k.Current(); ok {
		t.Fatalf("still current at the deadline without a successful ping")
	}
	if err := k.pingOnce(t.Context()); err != nil || len(lost) != 0 {
		t.Fatalf("at 8s: %v, lost %v; the store has not expired it yet", err, lost)
	}
	clock.advance(2 * time.Second) // 10s: TTL without a successful ping
	err := k.pingOnce(t.Context())
	if !errors.Is(err, ErrLost) || len(lost) != 1 || k.Err() == nil {
		t.Fatalf("after the TTL: %v, lost %v, Err %v; want ErrLost reported once", err, lost, k.Err())
	}
	pings := store.pings
	if err := k.pingOnce(t.Context()); !errors.Is(err, ErrLost) || store.pings != pings || len(lost) != 1 {
		t.Fatalf("a lost keeper pinged again or reported twice: %v %d %v", err, store.pings, lost)
	}
}

func TestKeeperPausedPastTTLIsLostWithoutAsking(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Unix(1000, 0)}
	store := &scriptedStore{}
	k := newTestKeeper(t, store, clock, nil)
	clock.advance(30 * time.Second) // SIGSTOP
	if err := k.pingOnce(t.Context()); !errors.Is(err, ErrLost) {
		t.Fatalf("after a 30s pause: %v, want ErrLost", err)
	}
	if store.pings != 0 {
		t.Fatalf("the keeper asked the store (%d pings); a pause past the TTL is lost whatever it says", store.pings)
	}
	if _, ok := k.Current(); ok {
		t.Fatalf("a lost keeper is current")
	}
}

func TestKeeperRunReportsLostAndReleasesOnStop(t *testing.T) {
	t.Parallel()
	store := &scriptedStore{claimErrs: []error{fmt.Errorf("busy: %w", ErrNoFreeShard), errors.New("db down")}}
	reg := prometheus.NewRegistry()
	lostCh := make(chan error, 1)
	k, err := Acquire(t.Context(), KeeperConfig{
		Store: store, DC: "dc1", Host: "h1", TTL: time.Hour, PingPeriod: time.Millisecond,
		ClaimRetry: time.Millisecond, Registerer: reg, OnLost: func(_ Lease, err error) { lostCh <- err },
	})
	if err != nil {
		t.Fatalf("Acquire after two refusals: %v", err)
	}
	if got := testutil.ToFloat64(k.metrics.held); got != 1 {
		t.Fatalf("held gauge %v, want 1", got)
	}
	// Stop: Run releases the lease and returns nil.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if len(store.released) != 1 || store.released[0].Epoch != 7 {
		t.Fatalf("released %v, want the epoch-7 lease", store.released)
	}
	if _, ok := k.Current(); ok {
		t.Fatalf("current after release")
	}

	// Lost: Run returns ErrLost and OnLost sees it.
	store2 := &scriptedStore{}
	k2, err := Acquire(t.Context(), KeeperConfig{
		Store: store2, DC: "dc1", Host: "h1", TTL: time.Hour, PingPeriod: time.Millisecond,
		OnLost: func(_ Lease, err error) { lostCh <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	store2.setPingErr(fmt.Errorf("taken: %w", ErrLost))
	if err := k2.Run(t.Context()); !errors.Is(err, ErrLost) {
		t.Fatalf("Run: %v, want ErrLost", err)
	}
	if err := <-lostCh; !errors.Is(err, ErrLost) {
		t.Fatalf("OnLost got %v", err)
	}
	if len(store2.released) != 0 {
		t.Fatalf("a lost lease was released: %v", store2.released)
	}
}

func TestKeeperConfigValidation(t *testing.T) {
	t.Parallel()
	store := &scriptedStore{}
	tests := []KeeperConfig{
		{DC: "dc", Host: "h"},
		{Store: store, Host: "h"},
		{Store: store, DC: "dc"},
		{Store: store, DC: "dc", Host: "h", TTL: time.Second, Margin: time.Second},
		{Store: store, DC: "dc", Host: "h", TTL: time.Second, Margin: 500 * time.Millisecond, PingPeriod: 500 * time.Millisecond},
		{Store: store, DC: "dc", Host: "h", TTL: time.Second, ClaimRetry: -1},
	}
	for _, cfg := range tests {
		if _, err := Acquire(t.Context(), cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("Acquire(%+v): %v, want ErrInvalid", cfg, err)
		}
	}
}

func TestKeeperAcquireGivesUpWithContext(t *testing.T) {
	t.Parallel()
	s, err := OpenSQL("sqlite", filepath.Join(t.TempDir(), "l.db"), SQLOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Acquire(t.Context(), KeeperConfig{Store: s, DC: "dc", Host: "h"}); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("Acquire on an empty database: %v, want ErrNotInitialized", err)
	}
	if err := s.Init(t.Context(), "dc", []Range{{0, 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(t.Context(), KeeperConfig{Store: s, DC: "dc", Host: "a"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second) // room for a first claim on a loaded machine
	defer cancel()
	_, err = Acquire(ctx, KeeperConfig{Store: s, DC: "dc", Host: "b", ClaimRetry: time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNoFreeShard) {
		t.Fatalf("Acquire with every shard held: %v, want DeadlineExceeded and ErrNoFreeShard", err)
	}
}
