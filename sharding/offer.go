package sharding

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// OfferKey is the identity of an offer (N1): every distinct tuple owns one
// <shard_id, doc_id> in the numerator's state.
type OfferKey struct {
	BusinessID  uint64
	OfferID     string
	ShopID      uint64
	WarehouseID uint64
}

// Compare orders offer keys by business_id, offer_id, shop_id, warehouse_id.
// It returns -1, 0 or +1.
func (k OfferKey) Compare(o OfferKey) int {
	switch {
	case k.BusinessID < o.BusinessID:
		return -1
	case k.BusinessID > o.BusinessID:
		return 1
	case k.OfferID < o.OfferID:
		return -1
	case k.OfferID > o.OfferID:
		return 1
	case k.ShopID < o.ShopID:
		return -1
	case k.ShopID > o.ShopID:
		return 1
	case k.WarehouseID < o.WarehouseID:
		return -1
	case k.WarehouseID > o.WarehouseID:
		return 1
	}
	return 0
}

// KeyHash is the stable 64-bit hash of an offer key: xxHash64 (seed 0) of
// business_id, shop_id and warehouse_id as little-endian uint64s followed by
// the bytes of offer_id. It never changes: schemes and stored orderings
// depend on it.
func KeyHash(k OfferKey) uint64 {
	var buf [88]byte
	binary.LittleEndian.PutUint64(buf[0:], k.BusinessID)
	binary.LittleEndian.PutUint64(buf[8:], k.ShopID)
	binary.LittleEndian.PutUint64(buf[16:], k.WarehouseID)
	if len(k.OfferID) <= len(buf)-24 { // the common case, without a streaming digest
		n := 24 + copy(buf[24:], k.OfferID)
		return xxhash.Sum64(buf[:n])
	}
	d := xxhash.New()
	_, _ = d.Write(buf[:24])
	_, _ = d.WriteString(k.OfferID)
	return d.Sum64()
}

// mix64 is the finalizer of SplitMix64: a stable bijection of uint64 that
// spreads sequential ids evenly.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
