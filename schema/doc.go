// Package schema owns what a space is once defined: its fields and their
// types, its primary key, its sharding key, how a key is checked and
// encoded, and which bucket a key belongs to. Every room that needs a
// space's rules uses its one compiled type, Space: the Go client places a
// call's key in its bucket with it, the router checks a call's bucket with
// it, and a replicaset's storage checks every op against it. A space's
// definition travels in three messages (the public API's, group 0's log
// and a replicaset's log); each converts to and from Definition in one
// place: convert.go here for the API's, internal/meta for group 0's,
// internal/replicaset for a replicaset's.
//
// The definition's rules are those of the data layer (docs/data.md,
// "Spaces"): a name of a letter or '_' then letters, digits or '_', at
// most 64 bytes; a valid tuple format; a primary key of 1 to
// tuple.MaxKeyParts distinct, non-nullable fields; and a sharding key of
// the primary key's leading parts. The bucket of a key is
// sharding.BucketOf of its sharding key's values.
//
// It is public and imports only api/, tuple/ and sharding/; it does no
// I/O and holds no mutable state: a compiled Space never changes.
package schema
