package sharding

import (
	"errors"
	"fmt"
)

// SchemeID is the stable numeric id of a sharding scheme. It is the S of the
// numerator's state version T.S.V.G.
type SchemeID uint32

// Scheme is one versioned placement: a shard count and a pure function of an
// offer's fields. Once released, a scheme's Shards and ShardOf never change.
type Scheme struct {
	ID   SchemeID
	Name string
	// Shards is the number of shards; ShardOf returns values in [0, Shards).
	Shards uint32
	// ShardOf places an offer. It must be pure and safe for concurrent use.
	ShardOf func(OfferKey) uint32
}

// Errors of this package.
var (
	ErrInvalidScheme   = errors.New("sharding: invalid scheme")
	ErrUnknownScheme   = errors.New("sharding: unknown scheme")
	ErrDuplicateScheme = errors.New("sharding: scheme id already registered")
	ErrShardOutOfRange = errors.New("sharding: shard out of range")
)

// Validate reports what is wrong with a scheme's definition, if anything.
func (s Scheme) Validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("%w: scheme %d has no name; give it one", ErrInvalidScheme, s.ID)
	case s.Shards == 0:
		return fmt.Errorf("%w: scheme %d (%s) has 0 shards; it needs at least 1", ErrInvalidScheme, s.ID, s.Name)
	case s.ShardOf == nil:
		return fmt.Errorf("%w: scheme %d (%s) has no ShardOf function", ErrInvalidScheme, s.ID, s.Name)
	}
	return nil
}

// Shard places an offer and checks the answer is a valid shard, so that a
// faulty user scheme is reported instead of corrupting placement.
func (s Scheme) Shard(k OfferKey) (uint32, error) {
	sh := s.ShardOf(k)
	if sh >= s.Shards {
		return 0, fmt.Errorf("%w: scheme %d (%s) put an offer on shard %d of %d; fix its ShardOf",
			ErrShardOutOfRange, s.ID, s.Name, sh, s.Shards)
	}
	return sh, nil
}

func (s Scheme) String() string { return fmt.Sprintf("%d (%s, %d shards)", s.ID, s.Name, s.Shards) }

// OfferHashScheme places each offer by KeyHash(key) mod shards: offers spread
// evenly, one business over many shards.
func OfferHashScheme(id SchemeID, name string, shards uint32) Scheme {
	n := uint64(max(shards, 1))
	return Scheme{ID: id, Name: name, Shards: shards, ShardOf: func(k OfferKey) uint32 {
		return uint32(KeyHash(k) % n)
	}}
}

// BusinessHashScheme places every offer of a business on one shard:
// mix64(business_id) mod shards, where mix64 is SplitMix64's finalizer.
func BusinessHashScheme(id SchemeID, name string, shards uint32) Scheme {
	n := uint64(max(shards, 1))
	return Scheme{ID: id, Name: name, Shards: shards, ShardOf: func(k OfferKey) uint32 {
		return uint32(mix64(k.BusinessID) % n)
	}}
}

// Builtin returns the schemes shipped with shardkit, as a fresh slice. Their
// ids are frozen:
//
//	0 offer-16     KeyHash mod 16
//	1 business-16  mix64(business_id) mod 16
//	2 offer-64     KeyHash mod 64
//	3 single       everything on shard 0
func Builtin() []Scheme {
	return []Scheme{
		OfferHashScheme(0, "offer-16", 16),
		BusinessHashScheme(1, "business-16", 16),
		OfferHashScheme(2, "offer-64", 64),
		{ID: 3, Name: "single", Shards: 1, ShardOf: func(OfferKey) uint32 { return 0 }},
	}
}
