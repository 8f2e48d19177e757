package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock gives the keeper its time. Now must carry a monotonic reading (as
// time.Now does): deadlines are compared with Sub, never with a database
// time.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the process's clock (time.Now).
func SystemClock() Clock { return systemClock{} }

// KeeperConfig configures a Keeper. Zero durations take the defaults.
type KeeperConfig struct {
	Store Store
	DC    string
	Host  string // unique per live server process (its advertised host:port)
	// TTL of the lease (default 10s): the store deems it expired when not
	// pinged for TTL.
	TTL time.Duration
	// PingPeriod between pings (default TTL/5).
	PingPeriod time.Duration
	// Margin (default TTL/5): the keeper stops answering for the shard at
	// (send time of the last successful ping) + TTL - Margin by its own
	// monotonic clock, so before the store could deem the lease expired.
	// It covers clock rate differences and scheduling delays.
	Margin time.Duration
	// ClaimRetry is how long Acquire waits between claims while every shard
	// is held (default PingPeriod).
	ClaimRetry time.Duration
	Clock      Clock
	Logger     *slog.Logger
	// OnLost is called once, from Run's goroutine, when the lease is lost.
	// Servers should stop at once (goals-server exits with status 3).
	OnLost func(Lease, error)
	// Registerer receives the keeper's metrics (nil: none).
	Registerer prometheus.Registerer
}

func (c *KeeperConfig) fill() error {
	if c.Store == nil {
		return fmt.Errorf("%w: KeeperConfig.Store is nil", ErrInvalid)
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.PingPeriod == 0 {
		c.PingPeriod = c.TTL / 5
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 5
	}
	if c.ClaimRetry == 0 {
		c.ClaimRetry = c.PingPeriod
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := validateClaim(ClaimRequest{DC: c.DC, Host: c.Host, TTL: c.TTL}); err != nil {
		return err
	}
	if c.Margin < 0 || c.Margin >= c.TTL {
		return fmt.Errorf("%w: margin %v must be in [0, TTL %v)", ErrInvalid, c.Margin, c.TTL)
	}
	if c.PingPeriod <= 0 || c.PingPeriod >= c.TTL-c.Margin {
		return fmt.Errorf("%w: ping period %v must be positive and below TTL - margin (%v), or the lease would lapse between pings",
			ErrInvalid, c.PingPeriod, c.TTL-c.Margin)
	}
	if c.ClaimRetry < 0 {
		return fmt.Errorf("%w: claim retry %v is negative", ErrInvalid, c.ClaimRetry)
	}
	return nil
}

// Keeper holds one shard lease: Acquire claims it, Run pings it, Current
// tells the server whether it may answer for the shard right now.
type Keeper struct {
	cfg     KeeperConfig
	metrics *keeperMetrics

	mu       sync.Mutex
	lease    Lease
	lastOK   time.Time // send time of the last successful claim or ping
	deadline time.Time // lastOK + TTL - Margin
	lost     error     // set once the lease is lost or released
}

// Acquire claims a shard for cfg.Host in cfg.DC, waiting ClaimRetry between
// attempts while every shard is held, until it succeeds or ctx ends. Store
// errors other than ErrNoFreeShard are logged and retried too, except
// ErrInvalid and ErrNotInitialized, which are returned.
func Acquire(ctx context.Context, cfg KeeperConfig) (*Keeper, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	k := &Keeper{cfg: cfg, metrics: newKeeperMetrics(cfg.Registerer)}
	req := ClaimRequest{DC: cfg.DC, Host: cfg.Host, TTL: cfg.TTL}
	last := errors.New("no claim attempted")
	gaveUp := func() error {
		return fmt.Errorf("lease: no shard of dc %q claimed before the context ended: %w (last refusal: %w)", cfg.DC, ctx.Err(), last)
	}
	for {
		sent := cfg.Clock.Now()
		l, err := cfg.Store.Claim(ctx, req)
		if err == nil {
			k.mu.Lock()
			k.lease, k.lastOK, k.deadline = l, sent, sent.Add(cfg.TTL-cfg.Margin)
			k.mu.Unlock()
			k.metrics.claimed(l)
			cfg.Logger.Info("shard lease claimed", "dc", l.DC, "shard", l.Shard, "range", l.Range.String(), "epoch", l.Epoch)
			return k, nil
		}
		if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotInitialized) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, gaveUp()
		}
		last = err
		k.metrics.claimFailed()
		if !errors.Is(err, ErrNoFreeShard) {
			cfg.Logger.Warn("shard lease claim failed; retrying", "dc", cfg.DC, "err", err)
		}
		t := time.NewTimer(cfg.ClaimRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, gaveUp()
		case <-t.C:
		}
	}
}

// Lease returns the lease claimed by Acquire, valid or not.
func (k *Keeper) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Current returns the lease and whether the server may answer for its shard
// now: the lease is not lost or released and the safety deadline has not
// passed on this process's monotonic clock.
func (k *Keeper) Current() (Lease, bool) {
	now := k.cfg.Clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease, k.lost == nil && now.Before(k.deadline)
}

// Deadline is the instant (this process's clock) after which the keeper
// stops answering unless a ping succeeds before.
func (k *Keeper) Deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.deadline
}

// Err returns why the lease is no longer held (wrapping ErrLost), or nil.
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// Run pings the lease every PingPeriod until ctx ends, then releases it and
// returns nil; or until the lease is lost, then calls OnLost and returns an
// error wrapping ErrLost. Call it once, after Acquire.
func (k *Keeper) Run(ctx context.Context) error {
	t := time.NewTimer(k.cfg.PingPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			k.release(ctx)
			return nil
		case <-t.C:
		}
		if err := k.pingOnce(ctx); err != nil {
			return err
		}
		t.Reset(k.cfg.PingPeriod)
	}
}

// pingOnce renews the lease once; it returns an error only when the lease
// is lost.
func (k *Keeper) pingOnce(ctx context.Context) error {
	k.mu.Lock()
	l, lastOK, lost := k.lease, k.lastOK, k.lost
	k.mu.Unlock()
	if lost != nil {
		return lost
	}
	sent := k.cfg.Clock.Now()
	if since := sent.Sub(lastOK); since >= k.cfg.TTL {
		// The store deems the lease expired by now whatever a ping would say
		// (the process was paused, or the store unreachable).
		return k.markLost(fmt.Errorf("%w: %v: no successful ping for %v, beyond the TTL %v", ErrLost, l, since, k.cfg.TTL))
	}
	pctx, cancel := context.WithTimeout(ctx, k.cfg.PingPeriod)
	err := k.cfg.Store.Ping(pctx, l)
	cancel()
	switch {
	case err == nil:
		k.mu.Lock()
		if k.lost == nil {
			k.lastOK, k.deadline = sent, sent.Add(k.cfg.TTL-k.cfg.Margin)
		}
		k.mu.Unlock()
		k.metrics.pinged(true)
		return nil
	case errors.Is(err, ErrLost):
		k.metrics.pinged(false)
		return k.markLost(err)
	case ctx.Err() != nil:
		return nil // stopping; Run releases
	default:
		k.metrics.pinged(false)
		k.cfg.Logger.Warn("shard lease ping failed; retrying", "lease", l.String(), "err", err,
			"serving_until", k.Deadline().Sub(k.cfg.Clock.Now()).String())
		return nil
	}
}

func (k *Keeper) markLost(err error) error {
	k.mu.Lock()
	if k.lost != nil {
		err = k.lost
		k.mu.Unlock()
		return err
	}
	k.lost = err
	l := k.lease
	k.mu.Unlock()
	k.metrics.lostLease()
	k.cfg.Logger.Error("shard lease lost", "lease", l.String(), "err", err)
	if k.cfg.OnLost != nil {
		k.cfg.OnLost(l, err)
	}
	return err
}

func (k *Keeper) release(ctx context.Context) {
	k.mu.Lock()
	if k.lost != nil {
		k.mu.Unlock()
		return
	}
	l := k.lease
	k.lost = fmt.Errorf("%w: %v: released", ErrLost, l)
	k.mu.Unlock()
	k.metrics.released()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.cfg.PingPeriod)
	defer cancel()
	if err := k.cfg.Store.Release(rctx, l); err != nil {
		k.cfg.Logger.Warn("shard lease release failed; it will expire after its TTL", "lease", l.String(), "err", err)
		return
	}
	k.cfg.Logger.Info("shard lease released", "lease", l.String())
}
