// Package synth generates synthetic generations of offers for benchmarks
// and tests of the numerator: offers appear, disappear and return.
//
// It owns the generator only; it must never be used for real data and never
// keeps state between calls: generation g of given Params is always the same.
package synth

import (
	"context"
	"fmt"
	"strconv"

	"github.com/shardkit/shardkit/numerator"
	"github.com/shardkit/shardkit/sharding"
)

// Params shape the generations.
type Params struct {
	Offers int64   // offers per generation
	Churn  float64 // share of offers replaced by new ones each generation
	Flap   float64 // share of offers that are present every other generation
}

// Offer returns the key of offer number i: ~1000 offers per business, a
// handful of shops and warehouses, offer ids of 12–20 bytes.
func Offer(i uint64) sharding.OfferKey {
	return sharding.OfferKey{
		BusinessID:  i / 1000,
		OfferID:     "sku-" + strconv.FormatUint(mix(i)%1e12, 36) + "-" + strconv.FormatUint(i, 10),
		ShopID:      (i / 1000) * 4 % 100003,
		WarehouseID: mix(i^0x9e37) % 8,
	}
}

// Present lists the offer numbers of generation g: a window of Offers
// numbers sliding by Churn*Offers each generation (old ones disappear, new
// ones appear) with a Flap share missing on odd generations (they return
// on even ones).
func Present(p Params, g int64, fn func(i uint64) error) error {
	shift := int64(float64(p.Offers) * p.Churn)
	start := uint64(g * shift)
	flap := uint64(p.Flap * 1e6)
	for i := start; i < start+uint64(p.Offers); i++ {
		if g%2 == 1 && mix(i)%1e6 < flap {
			continue
		}
		if err := fn(i); err != nil {
			return err
		}
	}
	return nil
}

// Write writes generation g as one Parquet file at path.
func Write(ctx context.Context, path string, p Params, g int64) (int64, error) {
	w, err := numerator.NewOfferWriter(path)
	if err != nil {
		return 0, err
	}
	var n int64
	err = Present(p, g, func(i uint64) error {
		if n%(1<<16) == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		n++
		return w.Write(Offer(i))
	})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("synth: generation %d: %w", g, err)
	}
	return n, nil
}

func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
