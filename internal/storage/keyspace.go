package storage

import "encoding/binary"

// The one list of the database's keyspaces. Every key of an instance's
// Pebble database starts with exactly one of these prefixes, and only the
// room named beside it reads or writes keys under it. No prefix is a
// prefix of another (TestKeyspacesAreDisjoint).
//
//	raft/<group:8>/...  internal/multiraft: every group's log, hard state,
//	                    applied state, truncation and restore markers
//	m/...               internal/meta: group 0's state machine (cluster
//	                    properties, instances, replicasets, buckets,
//	                    spaces, leases)
//	d/<group:8>/...     internal/replicaset: the data of one replicaset
//	                    group (layout below); its snapshot is this prefix
//	kv/<group:8>/...    internal/multiraft/kvsm: the engine tests' state
//	                    machine (never in a running instance)
//	l/...               internal/cluster: the instance's own records,
//	                    never replicated (l/identity)
//
// <group:8> is the Raft group id, 8 bytes big-endian, followed by '/'.
const (
	PrefixRaft  = "raft/"
	PrefixMeta  = "m/"
	PrefixData  = "d/"
	PrefixKV    = "kv/"
	PrefixLocal = "l/"
)

// Keyspace is one top-level prefix and the room that owns it.
type Keyspace struct {
	Prefix string
	Owner  string
}

// Keyspaces lists every top-level prefix with its owner.
func Keyspaces() []Keyspace {
	return []Keyspace{
		{PrefixRaft, "internal/multiraft"},
		{PrefixMeta, "internal/meta"},
		{PrefixData, "internal/replicaset"},
		{PrefixKV, "internal/multiraft/kvsm"},
		{PrefixLocal, "internal/cluster"},
	}
}

// GroupPrefix returns top + <group:8> + "/": the prefix of one group's keys
// in a per-group keyspace (PrefixRaft, PrefixData, PrefixKV).
func GroupPrefix(top string, group uint64) []byte {
	k := make([]byte, 0, len(top)+9)
	k = append(k, top...)
	k = binary.BigEndian.AppendUint64(k, group)
	return append(k, '/')
}

// The data of one replicaset, under GroupPrefix(PrefixData, group). Every
// record the replicaset's state machine keeps is replicated through its
// log, so every member holds the same keys at the same applied index; a
// write that concerns one bucket touches only keys that carry that bucket.
// Tuples are stored bucket first, so a bucket's tuples (every space) are
// one range, which a move copies and a cleanup deletes, and a range read
// within a bucket is a scan in primary-key order.
//
//	s/<space:4>                        a space's definition as this replicaset applied it
//	v/                                 the schema version applied here
//	c/                                 the largest leader-stamped time applied
//	                                   (request ids expire by it)
//	b/<bucket:4>                       a bucket's state: active, sending,
//	                                   receiving or garbage, its generation and peer
//	t/<bucket:4><space:4><key>         a tuple: its version (8 bytes) + the tuple codec
//	x/<bucket:4><space:4><key>         a tombstone left by a delete while the
//	                                   bucket is receiving (its version)
//	n/<bucket:4><space:4>              how many tuples of a space a bucket holds
//	r/<bucket:4>                       the bucket's revision: one more for every
//	                                   batch applied to it, continued across moves
//	e/<bucket:4><revision:8>           the bucket's change history: the batch that
//	                                   made the revision (its changed tuples), the
//	                                   last revisions of each bucket within the
//	                                   bounds of h/
//	h/                                 the history's bounds (replicaset SetHistory)
//	i/<ms:8><request id:16>            a recent write's request id and its result,
//	                                   by the leader-stamped time of its write
//	                                   (ms, the clock c/ at its entry): ids leave
//	                                   the window in key order, a whole time slot
//	                                   at a time, by one range deletion
//	j/<ms:8><index:8><chunk:4>         the request ids a copy's chunk brought a
//	                                   bucket, one record (a CopyChunk of its
//	                                   requests) for all of them, under the time
//	                                   of the copy's entry (index, the chunk's
//	                                   place in it): they leave with i/'s slots
//
// Every sub-keyspace is its letter and '/'. <bucket:4> and <space:4> are
// big-endian; <key> is the primary key in the tuple package's
// order-preserving key codec.
const (
	DataSpace         = 's'
	DataSchema        = 'v'
	DataClock         = 'c'
	DataBucket        = 'b'
	DataTuple         = 't'
	DataTombstone     = 'x'
	DataCount         = 'n'
	DataRevision      = 'r'
	DataEvent         = 'e'
	DataHistory       = 'h'
	DataRequestID     = 'i'
	DataRequestRecord = 'j'
)
