package client_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The examples run against a one-instance cluster this package's tests
// start (clusterAddr); point Peers at your own instances instead.

// Define a space, write a row and read it back.
func ExampleSpace_Insert() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Peers: []string{clusterAddr}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	_, err = c.CreateSpace(ctx, client.SpaceDef{
		Name: "example_users",
		Format: tuple.Format{
			{Name: "id", Type: tuple.TypeUnsigned},
			{Name: "name", Type: tuple.TypeString},
			{Name: "email", Type: tuple.TypeString, Nullable: true},
		},
		PrimaryKey: []string{"id"},
	}, true)
	if err != nil {
		panic(err)
	}
	users := c.Space("example_users")
	if _, err := users.Insert(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("ann"), tuple.Null()}); err != nil {
		panic(err)
	}
	_, err = users.Insert(ctx, tuple.Tuple{tuple.Uint(1), tuple.String("bob"), tuple.Null()})
	fmt.Println("second insert is a duplicate:", errors.Is(err, client.ErrAlreadyExists))

	got, _, err := users.Select(ctx, []tuple.Value{tuple.Uint(1)}, client.RW)
	if err != nil {
		panic(err)
	}
	fmt.Println(got.Found, string(tuple.AppendJSON(nil, got.Tuple)))
	// Output:
	// second insert is a duplicate: true
	// true [1,"ann",null]
}

// Update with Tarantool's operators, then compare-and-set on the version.
func ExampleSpace_Update() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Peers: []string{clusterAddr}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	_, err = c.CreateSpace(ctx, client.SpaceDef{
		Name:       "example_counters",
		Format:     tuple.Format{{Name: "name", Type: tuple.TypeString}, {Name: "n", Type: tuple.TypeInteger}},
		PrimaryKey: []string{"name"},
	}, true)
	if err != nil {
		panic(err)
	}
	counters := c.Space("example_counters")
	if _, err := counters.Replace(ctx, tuple.Tuple{tuple.String("hits"), tuple.Int(0)}); err != nil {
		panic(err)
	}
	key := []tuple.Value{tuple.String("hits")}
	up, err := counters.Update(ctx, key, []tuple.Op{{Code: tuple.OpAdd, Field: tuple.FieldRef{Name: "n"}, Arg: tuple.Int(5)}})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(tuple.AppendJSON(nil, up.Tuple)))

	// Another writer got there first: the old version no longer holds.
	_, err = counters.Replace(ctx, tuple.Tuple{tuple.String("hits"), tuple.Int(100)}, client.IfVersion(up.Version-1))
	fmt.Println("stale write refused:", errors.Is(err, client.ErrConditionFailed))
	_, err = counters.Replace(ctx, tuple.Tuple{tuple.String("hits"), tuple.Int(100)}, client.IfVersion(up.Version))
	fmt.Println("current write:", err)
	// Output:
	// ["hits",5]
	// stale write refused: true
	// current write: <nil>
}

// Rows of two spaces with the same sharding key share a bucket, so a
// batch changes them together: all or nothing.
func ExampleBatch() {
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Peers: []string{clusterAddr}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	for _, name := range []string{"example_orders", "example_order_state"} {
		_, err := c.CreateSpace(ctx, client.SpaceDef{
			Name:       name,
			Format:     tuple.Format{{Name: "order", Type: tuple.TypeUnsigned}, {Name: "what", Type: tuple.TypeString}},
			PrimaryKey: []string{"order"},
		}, true)
		if err != nil {
			panic(err)
		}
	}
	res, err := c.Batch().
		Insert("example_orders", tuple.Tuple{tuple.Uint(77), tuple.String("book")}).
		Insert("example_order_state", tuple.Tuple{tuple.Uint(77), tuple.String("new")}).
		Do(ctx)
	fmt.Println(len(res), err)
	n, err := c.Count(ctx, "example_order_state")
	fmt.Println(n, err)
	// Output:
	// 2 <nil>
	// 1 <nil>
}
