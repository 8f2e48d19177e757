// Package sharding places records on shards. It is public and shared: the
// numerator and any other user compute an offer's shard with the same code
// (N5), and the cluster's data layer, its server and its clients, compute a
// record's bucket with the same code.
//
// It owns versioned sharding schemes: each scheme has a stable numeric id, a
// shard count and a pure function of a record's fields. A Registry maps ids
// to schemes; Builtin lists the schemes shipped with shardkit, and users
// register their own. It owns the bucket hash of the data layer: BucketOf
// places a sharding key (typed values of package tuple) in one of count
// buckets, 1 + CRC-32C of the key's encoding mod count.
//
// It must never change what a registered id means: data placed under scheme
// N stays placed under scheme N forever, so a scheme's function and shard
// count are frozen once released; a new placement is a new id. Likewise
// BucketOf and the key encoding it hashes are frozen. It holds no
// package-level mutable state and does no I/O.
package sharding
