// Package sharding places records on shards. It is public and shared: the
// numerator and any other user compute an offer's shard with the same code
// (N5), and the cluster's data layer will add its bucket ids and key ranges
// here.
//
// It owns versioned sharding schemes: each scheme has a stable numeric id, a
// shard count and a pure function of a record's fields. A Registry maps ids
// to schemes; Builtin lists the schemes shipped with shardkit, and users
// register their own.
//
// It must never change what a registered id means: data placed under scheme
// N stays placed under scheme N forever, so a scheme's function and shard
// count are frozen once released; a new placement is a new id. It holds no
// package-level mutable state and does no I/O.
package sharding
