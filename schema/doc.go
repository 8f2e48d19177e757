// Package schema owns what a space is once defined: its fields and their
// types, its primary key, its sharding key, how a key is checked and
// encoded, and which bucket a key belongs to. Every room that needs a
// space's rules uses its one compiled type, Space: the Go client places a
// call's key in its bucket with it, the router checks a call's bucket with
// it, and a replicaset's storage checks every op against it. A space's
// definition travels in two messages: the public API's and group 0's
// (which a replicaset's log carries as it is). Each converts to and from
// Definition in one place: convert.go here for the API's, internal/meta
// (spaces.go) for group 0's.
//
// The definition's rules are those of the data layer (docs/data.md,
// "Spaces"): a name of a letter or '_' then letters, digits or '_', at
// most 64 bytes; a valid tuple format; a primary key of 1 to
// tuple.MaxKeyParts distinct, non-nullable fields; and a sharding key of
// the primary key's fields in any position, in an order of its own. The
// bucket of a key is sharding.BucketOf of its sharding key's values, in
// that order.
//
// It is public and imports only api/, tuple/ and sharding/; it does no
// I/O and holds no mutable state: a compiled Space never changes.
package schema
