package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Backends wrap them with details; test with errors.Is.
var (
	// ErrNoFreeShard: every shard of the datacenter is held by a live lease
	// right now. Claim again later (Keeper does).
	ErrNoFreeShard = errors.New("lease: no free shard")
	// ErrLost: the lease is no longer held: it expired in the store, or
	// another host claimed the shard (a higher epoch).
	ErrLost = errors.New("lease: lost")
	// ErrNotInitialized: the datacenter has no shard rows (or the table is
	// missing). Run `shardkit cache init-leases` first.
	ErrNotInitialized = errors.New("lease: datacenter has no shards")
	// ErrAlreadyInitialized: Init was asked for other ranges than the
	// datacenter already has.
	ErrAlreadyInitialized = errors.New("lease: datacenter already has other shards")
	// ErrInvalid: bad argument (datacenter, host, TTL, range, table name).
	ErrInvalid = errors.New("lease: invalid argument")
)

// Store keeps the shard lease rows. Implementations are safe for concurrent
// use. Claim, Ping and Release are single short operations; waiting and
// periodic pinging are the Keeper's job.
type Store interface {
	// Init creates what the store needs (the table) when missing and the
	// shard rows of dc, one per range, with epoch 0 and no holder. It is a
	// no-op when dc already has exactly these ranges, and ErrAlreadyInitialized
	// when it has other ones.
	Init(ctx context.Context, dc string, ranges []Range) error
	// Claim takes one shard of req.DC for req.Host, preferring a shard the
	// host already holds, else a free one or the one whose lease expired
	// longest ago (by the store's clock), and increments its epoch. It
	// returns ErrNoFreeShard when every shard is held by a live lease.
	Claim(ctx context.Context, req ClaimRequest) (Lease, error)
	// Ping renews l: it succeeds only while l is still the shard's current
	// lease (same host and epoch) and has not expired; otherwise ErrLost.
	Ping(ctx context.Context, l Lease) error
	// Release frees the shard at once if l is still its current lease;
	// otherwise ErrLost.
	Release(ctx context.Context, l Lease) error
	// Rows lists the shards of dc by shard number (ErrNotInitialized if none).
	Rows(ctx context.Context, dc string) ([]Row, error)
	// Close releases the store's resources (not the leases).
	Close() error
}

// ClaimRequest asks for one shard of DC for Host, with a lease of TTL.
type ClaimRequest struct {
	DC   string
	Host string // unique per live server process, e.g. its advertised host:port
	TTL  time.Duration
}

// Lease is one holding of a shard.
type Lease struct {
	DC    string
	Shard int   // shard number within DC, 0..N-1
	Range Range // the shard's half-open key range
	Host  string
	Epoch uint64 // fencing number: grows on every claim of (DC, Shard)
	TTL   time.Duration
}

func (l Lease) String() string {
	return fmt.Sprintf("dc %q shard %d %v epoch %d host %q", l.DC, l.Shard, l.Range, l.Epoch, l.Host)
}

// Row is one shard as the store sees it.
type Row struct {
	DC         string
	Shard      int
	Range      Range
	Host       string // "" when free
	Epoch      uint64
	TTL        time.Duration
	LockedTime time.Time // zero when free; database time, UTC
	LastPing   time.Time // zero when free; database time, UTC
	Expired    bool      // judged by the store's clock when read; true for a free row
}

const (
	maxDCLen   = 64
	maxHostLen = 255
)

func validateDC(dc string) error {
	if dc == "" || len(dc) > maxDCLen {
		return fmt.Errorf("%w: datacenter name %q must have 1..%d bytes", ErrInvalid, dc, maxDCLen)
	}
	return nil
}

func validateClaim(req ClaimRequest) error {
	if err := validateDC(req.DC); err != nil {
		return err
	}
	if req.Host == "" || len(req.Host) > maxHostLen {
		return fmt.Errorf("%w: host %q must have 1..%d bytes", ErrInvalid, req.Host, maxHostLen)
	}
	if req.TTL < time.Millisecond {
		return fmt.Errorf("%w: lease TTL %v is below 1ms", ErrInvalid, req.TTL)
	}
	return nil
}

func validateLease(l Lease) error {
	if err := validateClaim(ClaimRequest{DC: l.DC, Host: l.Host, TTL: l.TTL}); err != nil {
		return err
	}
	if l.Shard < 0 {
		return fmt.Errorf("%w: shard number %d is negative", ErrInvalid, l.Shard)
	}
	return nil
}
