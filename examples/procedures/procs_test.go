package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/tuple"
)

// fakeContext is a replicaset of a few buckets in memory; its Range
// returns at most two tuples a page, so that paging is exercised.
type fakeContext struct {
	buckets map[uint32][]tuple.Tuple // by bucket, in key order
	writes  []proc.Op
}

func (f *fakeContext) Replicaset() string { return "r1" }

func (f *fakeContext) Get(string, ...tuple.Value) (tuple.Tuple, uint64, bool, error) {
	return nil, 0, false, errors.New("not used")
}

func (f *fakeContext) Range(space string, bucket uint32, after []tuple.Value, limit int) ([]proc.Versioned, bool, error) {
	if space != "products" {
		return nil, false, errors.New(`no space "` + space + `"`)
	}
	var out []proc.Versioned
	for _, t := range f.buckets[bucket] {
		if after != nil && tuple.CompareKeys(t[:1], after) <= 0 {
			continue
		}
		if len(out) == min(limit, 2) {
			return out, true, nil
		}
		out = append(out, proc.Versioned{Tuple: t, Version: 1})
	}
	return out, false, nil
}

func (f *fakeContext) Count(string) (uint64, error) { return 0, errors.New("not used") }

func (f *fakeContext) CountHeld(context.Context, string) (proc.HeldCount, error) {
	return proc.HeldCount{}, errors.New("not used")
}

func (f *fakeContext) Buckets() ([]uint32, error) {
	return []uint32{1, 2, 3}, nil
}

func (f *fakeContext) Write(_ context.Context, ops ...proc.Op) ([]proc.Result, error) {
	f.writes = append(f.writes, ops...)
	return []proc.Result{{Found: true, Tuple: tuple.Tuple{tuple.Uint(1), tuple.String("pen"), tuple.Double(1.5), tuple.Uint(1)}, Version: 2}}, nil
}

func product(id uint64, price float64) tuple.Tuple {
	return tuple.Tuple{tuple.Uint(id), tuple.String("p"), tuple.Double(price), tuple.Uint(0)}
}

func TestTopPrices(t *testing.T) {
	t.Parallel()
	f := &fakeContext{buckets: map[uint32][]tuple.Tuple{
		1: {product(1, 5), product(4, 1), product(7, 9), product(9, 5)},
		2: {product(2, 9.5), {tuple.Uint(3), tuple.String("no price")}},
		3: {product(5, 5), product(6, 0.5), product(8, 7)},
	}}
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{1, "[2,9.5]"},
		{4, "[2,9.5,7,9.0,8,7.0,1,5.0]"},
		{6, "[2,9.5,7,9.0,8,7.0,1,5.0,5,5.0,9,5.0]"},
		{100, "[2,9.5,7,9.0,8,7.0,1,5.0,5,5.0,9,5.0,4,1.0,6,0.5]"},
	} {
		got, err := topPrices(t.Context(), f, tuple.Tuple{tuple.String("products"), tuple.Uint(c.n)})
		if err != nil || string(tuple.AppendJSON(nil, got)) != c.want {
			t.Errorf("top_prices(products, %d) = %s, %v; want %s", c.n, tuple.AppendJSON(nil, got), err, c.want)
		}
	}
	for _, c := range []struct {
		args tuple.Tuple
		want string
	}{
		{tuple.Tuple{tuple.String("products")}, "takes (space, n); got 1 arguments"},
		{tuple.Tuple{tuple.Uint(1), tuple.Uint(1)}, "the space must be a string"},
		{tuple.Tuple{tuple.String("products"), tuple.Uint(0)}, "n must be an integer from 1 to 1000"},
		{tuple.Tuple{tuple.String("products"), tuple.Double(2)}, "n must be an integer"},
		{tuple.Tuple{tuple.String("nope"), tuple.Uint(2)}, `no space "nope"`},
	} {
		if _, err := topPrices(t.Context(), f, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("top_prices%s = %v; want %q", tuple.AppendJSON(nil, c.args), err, c.want)
		}
	}
}

func TestBump(t *testing.T) {
	t.Parallel()
	f := &fakeContext{}
	got, err := bump(t.Context(), f, tuple.Tuple{tuple.String("products"), tuple.Uint(1)})
	if err != nil || string(tuple.AppendJSON(nil, got)) != `[1,"pen",1.5,1]` {
		t.Fatalf("bump = %s, %v", tuple.AppendJSON(nil, got), err)
	}
	if len(f.writes) != 1 || f.writes[0].Kind != proc.Update || f.writes[0].Space != "products" ||
		!tuple.Tuple(f.writes[0].Key).Equal(tuple.Tuple{tuple.Uint(1)}) || f.writes[0].Ops[0].Field.Name != "bumps" {
		t.Errorf("bump wrote %+v", f.writes)
	}
	if _, err := bump(t.Context(), f, tuple.Tuple{tuple.String("products")}); err == nil || !strings.Contains(err.Error(), "bump takes (space, key...)") {
		t.Errorf("bump without a key: %v", err)
	}
}
