// Command shardkit-procs is shardkit with two stored procedures of its
// own, the way to build any binary that serves your procedures: register
// them with cmd/shardkit/app.Main, and run the cluster's instances from
// the binary you built. Everything else is the stock shardkit command
// line (run, status, space, insert, call, map-call, ...).
//
//   - top_prices(space, n) ro: the n most expensive products on the
//     replicaset that runs it, most expensive first, as
//     [id1, price1, id2, price2, ...]; map-call it and merge for the
//     cluster's top n.
//   - bump(space, key...) rw: adds 1 to the product's field bumps, through
//     Context.Write (replicated and deduplicated like any write), and
//     returns the product after the bump ([] when there is none).
//
// A product is a tuple of the space created in the README:
// [id unsigned (the primary key), name string, price double, bumps unsigned].
package main

import (
	"os"

	"github.com/shardkit/shardkit/cmd/shardkit/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], procedures()...))
}
