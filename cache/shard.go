package cache

import (
	"fmt"

	cachev1 "github.com/shardkit/shardkit/api/cache/v1"
	"github.com/shardkit/shardkit/cache/lease"
)

// Shard is the half-open range [Begin, End) of the uint64 sharding-key space
// a server holds, with the epoch of its lease. End == 0 stands for 2^64.
type Shard struct {
	Begin uint64
	End   uint64
	Epoch uint64
}

// Range returns the shard's key range.
func (s Shard) Range() lease.Range { return lease.Range{Begin: s.Begin, End: s.End} }

// Contains reports whether the sharding key k is in the shard.
func (s Shard) Contains(k uint64) bool { return s.Range().Contains(k) }

// Valid reports whether the shard's range is non-empty.
func (s Shard) Valid() bool { return s.Range().Valid() }

func (s Shard) String() string {
	return fmt.Sprintf("%v@%d", s.Range(), s.Epoch)
}

// Proto returns s as the shared wire message.
func (s Shard) Proto() *cachev1.Shard {
	return &cachev1.Shard{Begin: s.Begin, End: s.End, Epoch: s.Epoch}
}

// ShardFromProto reads the shared wire message; a nil message is an error
// (a server must always say its shard).
func ShardFromProto(p *cachev1.Shard) (Shard, error) {
	if p == nil {
		return Shard{}, fmt.Errorf("%w: the answer carries no shard", ErrBadAnswer)
	}
	s := Shard{Begin: p.GetBegin(), End: p.GetEnd(), Epoch: p.GetEpoch()}
	if !s.Valid() {
		return Shard{}, fmt.Errorf("%w: the answer's shard %v is empty", ErrBadAnswer, s.Range())
	}
	return s, nil
}

// ShardSource tells a server's Handler which shard it may answer for now.
type ShardSource interface {
	// Current returns the shard and whether the server holds it right now.
	Current() (Shard, bool)
}

type staticShard Shard

func (s staticShard) Current() (Shard, bool) { return Shard(s), true }

// StaticShard is a ShardSource that always holds s (tests, single-host
// setups without leases).
func StaticShard(s Shard) ShardSource { return staticShard(s) }

type keeperShards struct{ k *lease.Keeper }

func (ks keeperShards) Current() (Shard, bool) {
	l, ok := ks.k.Current()
	return Shard{Begin: l.Range.Begin, End: l.Range.End, Epoch: l.Epoch}, ok
}

// LeaseShards adapts a lease keeper: the server holds the keeper's shard
// while its lease is valid by the server's monotonic clock.
func LeaseShards(k *lease.Keeper) ShardSource { return keeperShards{k} }
