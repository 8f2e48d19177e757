package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/shardkit/shardkit/proc"
	"github.com/shardkit/shardkit/tuple"
)

// The products' fields that the procedures use (tuple positions, 0-based:
// a procedure sees tuples, not field names; an update op may name fields).
const (
	idField    = 0
	priceField = 2
	bumpsName  = "bumps"
	maxTop     = 1000
	pageSize   = 1000
)

func procedures() []proc.Procedure {
	return []proc.Procedure{
		{Name: "top_prices", Mode: proc.RO, Func: topPrices,
			Doc: "top_prices(space, n): the n most expensive products here, as [id1, price1, id2, price2, ...]"},
		{Name: "bump", Mode: proc.RW, Func: bump,
			Doc: "bump(space, key...): add 1 to the product's bumps; returns the product ([] when none)"},
	}
}

type priced struct {
	id    tuple.Value
	price float64
}

// topPrices reads every product of the space in the buckets active on this
// replicaset, a page at a time, and keeps the n most expensive (ties by
// id). Tuples whose price is not a double are skipped.
func topPrices(ctx context.Context, c proc.Context, args tuple.Tuple) (tuple.Tuple, error) {
	if len(args) != 2 {
		return nil, fmt.Errorf("top_prices takes (space, n); got %d arguments", len(args))
	}
	space, ok := args[0].AsString()
	if !ok {
		return nil, fmt.Errorf("top_prices: the space must be a string, got %s", args[0])
	}
	n, ok := args[1].AsUint()
	if !ok || n < 1 || n > maxTop {
		return nil, fmt.Errorf("top_prices: n must be an integer from 1 to %d, got %s", maxTop, args[1])
	}
	buckets, err := c.Buckets()
	if err != nil {
		return nil, err
	}
	var top []priced
	for _, b := range buckets {
		var after []tuple.Value
		for {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			page, more, err := c.Range(space, b, after, pageSize)
			if err != nil {
				return nil, err
			}
			for _, v := range page {
				if len(v.Tuple) <= priceField {
					continue
				}
				if p, ok := v.Tuple[priceField].AsDouble(); ok {
					top = keepTop(top, priced{id: v.Tuple[idField], price: p}, int(n))
				}
			}
			if !more || len(page) == 0 {
				break
			}
			after = page[len(page)-1].Tuple[:idField+1] // the primary key: id
		}
	}
	out := make(tuple.Tuple, 0, 2*len(top))
	for _, p := range top {
		out = append(out, p.id, tuple.Double(p.price))
	}
	return out, nil
}

// keepTop inserts p into top (most expensive first, ties by id) and keeps
// at most n.
func keepTop(top []priced, p priced, n int) []priced {
	i, _ := slices.BinarySearchFunc(top, p, func(a, b priced) int {
		if a.price != b.price {
			if a.price > b.price {
				return -1
			}
			return 1
		}
		return tuple.Compare(a.id, b.id)
	})
	if i >= n {
		return top
	}
	top = slices.Insert(top, i, p)
	if len(top) > n {
		top = top[:n]
	}
	return top
}

// bump adds 1 to the bumps of the product with the key, in one write
// through the replicaset's log: a retried call (same request id) does
// not bump twice.
func bump(ctx context.Context, c proc.Context, args tuple.Tuple) (tuple.Tuple, error) {
	if len(args) < 2 {
		return nil, errors.New("bump takes (space, key...): the space and the product's primary key")
	}
	space, ok := args[0].AsString()
	if !ok {
		return nil, fmt.Errorf("bump: the space must be a string, got %s", args[0])
	}
	res, err := c.Write(ctx, proc.Op{
		Kind: proc.Update, Space: space, Key: args[1:],
		Ops: []tuple.Op{{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: bumpsName}, Arg: tuple.Uint(1)}},
	})
	if err != nil {
		return nil, err
	}
	if !res[0].Found {
		return tuple.Tuple{}, nil
	}
	return res[0].Tuple, nil
}
