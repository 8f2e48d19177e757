package sharding

import (
	"errors"
	"strconv"
	"sync"
	"testing"
)

// The hash and the built-in placements are frozen: stored states depend on
// them. These golden values must never change.
func TestKeyHashAndBuiltinPlacementsAreFrozen(t *testing.T) {
	t.Parallel()
	k := OfferKey{BusinessID: 42, OfferID: "sku-1", ShopID: 7, WarehouseID: 3}
	if got, want := KeyHash(k), uint64(goldenHash); got != want {
		t.Fatalf("KeyHash(%+v) = %#x, want %#x", k, got, want)
	}
	want := map[SchemeID]uint32{0: goldenHash % 16, 1: goldenBusiness16, 2: goldenHash % 64, 3: 0}
	for _, s := range Builtin() {
		got, err := s.Shard(k)
		if err != nil {
			t.Fatal(err)
		}
		if got != want[s.ID] {
			t.Errorf("scheme %s placed %+v on %d, want %d", s, k, got, want[s.ID])
		}
	}
}

func TestKeyHashSeesEveryField(t *testing.T) {
	t.Parallel()
	base := OfferKey{BusinessID: 1, OfferID: "a", ShopID: 2, WarehouseID: 3}
	variants := []OfferKey{
		{BusinessID: 9, OfferID: "a", ShopID: 2, WarehouseID: 3},
		{BusinessID: 1, OfferID: "b", ShopID: 2, WarehouseID: 3},
		{BusinessID: 1, OfferID: "a", ShopID: 9, WarehouseID: 3},
		{BusinessID: 1, OfferID: "a", ShopID: 2, WarehouseID: 9},
	}
	for _, v := range variants {
		if KeyHash(v) == KeyHash(base) {
			t.Errorf("KeyHash(%+v) == KeyHash(%+v)", v, base)
		}
	}
}

func TestBuiltinSchemesSpreadAndStayInRange(t *testing.T) {
	t.Parallel()
	for _, s := range Builtin() {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		counts := make([]int, s.Shards)
		const n = 20000
		for i := range n {
			k := OfferKey{BusinessID: uint64(i % 5000), OfferID: "o" + strconv.Itoa(i), ShopID: uint64(i % 13), WarehouseID: 1}
			sh, err := s.Shard(k)
			if err != nil {
				t.Fatal(err)
			}
			counts[sh]++
		}
		for sh, c := range counts {
			// Each shard gets n/Shards on average; a hash that lost a shard or
			// piled onto one would fall far outside half to double of that.
			avg := n / int(s.Shards)
			if c < avg/2 || c > avg*2 {
				t.Errorf("scheme %s: shard %d got %d of %d offers (average %d)", s, sh, c, n, avg)
			}
		}
	}
}

func TestBusinessSchemeKeepsABusinessTogether(t *testing.T) {
	t.Parallel()
	s := BusinessHashScheme(10, "b", 16)
	first := s.ShardOf(OfferKey{BusinessID: 77, OfferID: "x"})
	for i := range 100 {
		if got := s.ShardOf(OfferKey{BusinessID: 77, OfferID: strconv.Itoa(i), ShopID: uint64(i)}); got != first {
			t.Fatalf("offer %d of business 77 on shard %d, first on %d", i, got, first)
		}
	}
}

func TestShardRefusesOutOfRange(t *testing.T) {
	t.Parallel()
	bad := Scheme{ID: 9, Name: "bad", Shards: 4, ShardOf: func(OfferKey) uint32 { return 4 }}
	if _, err := bad.Shard(OfferKey{}); !errors.Is(err, ErrShardOutOfRange) {
		t.Fatalf("Shard = %v, want ErrShardOutOfRange", err)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	custom := OfferHashScheme(100, "offer-8", 8)
	tests := []struct {
		name    string
		scheme  Scheme
		wantErr error
	}{
		{"new id", custom, nil},
		{"taken id", OfferHashScheme(0, "again", 8), ErrDuplicateScheme},
		{"no name", Scheme{ID: 101, Shards: 1, ShardOf: func(OfferKey) uint32 { return 0 }}, ErrInvalidScheme},
		{"zero shards", Scheme{ID: 102, Name: "z", ShardOf: func(OfferKey) uint32 { return 0 }}, ErrInvalidScheme},
		{"no function", Scheme{ID: 103, Name: "f", Shards: 1}, ErrInvalidScheme},
	}
	r := DefaultRegistry()
	for _, tt := range tests {
		err := r.Register(tt.scheme)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("%s: Register = %v, want %v", tt.name, err, tt.wantErr)
		}
	}
	got, err := r.Lookup(100)
	if err != nil || got.Name != "offer-8" || got.Shards != 8 {
		t.Fatalf("Lookup(100) = %v, %v", got, err)
	}
	if _, err := r.Lookup(555); !errors.Is(err, ErrUnknownScheme) {
		t.Fatalf("Lookup(555) = %v, want ErrUnknownScheme", err)
	}
	if ids := r.IDs(); len(ids) != 5 || ids[0] != 0 || ids[4] != 100 {
		t.Fatalf("IDs = %v", ids)
	}
	// A fresh default registry does not see what another one registered.
	if _, err := DefaultRegistry().Lookup(100); !errors.Is(err, ErrUnknownScheme) {
		t.Fatalf("fresh registry knows scheme 100: %v", err)
	}
}

func TestRegistryConcurrentUse(t *testing.T) {
	t.Parallel()
	var r Registry
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_ = r.Register(OfferHashScheme(SchemeID(i), "s"+strconv.Itoa(i), 2))
			_, _ = r.Lookup(SchemeID(i))
			_ = r.IDs()
		})
	}
	wg.Wait()
	if len(r.IDs()) != 8 {
		t.Fatalf("IDs = %v, want 8 ids", r.IDs())
	}
}

func TestNewRegistryRefusesDuplicates(t *testing.T) {
	t.Parallel()
	if _, err := NewRegistry(Builtin()[0], Builtin()[0]); !errors.Is(err, ErrDuplicateScheme) {
		t.Fatalf("NewRegistry = %v, want ErrDuplicateScheme", err)
	}
}

func TestCompareOrdersFieldsInKeyOrder(t *testing.T) {
	t.Parallel()
	ordered := []OfferKey{
		{BusinessID: 1, OfferID: "b", ShopID: 9, WarehouseID: 9},
		{BusinessID: 2, OfferID: "a", ShopID: 1, WarehouseID: 1},
		{BusinessID: 2, OfferID: "b", ShopID: 0, WarehouseID: 5},
		{BusinessID: 2, OfferID: "b", ShopID: 1, WarehouseID: 0},
		{BusinessID: 2, OfferID: "b", ShopID: 1, WarehouseID: 1},
	}
	for i := range ordered {
		for j := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ordered[i].Compare(ordered[j]); got != want {
				t.Errorf("Compare(%v, %v) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}
