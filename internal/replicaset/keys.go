package replicaset

import (
	"encoding/binary"

	"github.com/shardkit/shardkit/internal/storage"
)

// keys builds the keys of one replicaset group's data, laid out as
// internal/storage's keyspace list says (under d/<group>/).
type keys struct {
	prefix []byte // d/<group>/
}

func newKeys(g uint64) keys { return keys{prefix: storage.GroupPrefix(storage.PrefixData, g)} }

func (k keys) sub(tag byte, extra int) []byte {
	out := make([]byte, 0, len(k.prefix)+2+extra)
	out = append(out, k.prefix...)
	return append(out, tag, '/')
}

// space is s/<space:4>.
func (k keys) space(id uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataSpace, 4), id)
}

func (k keys) spaces() []byte { return k.sub(storage.DataSpace, 0) }

// schema is the applied schema version's key.
func (k keys) schema() []byte { return k.sub(storage.DataSchema, 0) }

// clock is the largest leader-stamped time applied.
func (k keys) clock() []byte { return k.sub(storage.DataClock, 0) }

// bucket is b/<bucket:4>.
func (k keys) bucket(b uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataBucket, 4), b)
}

func (k keys) buckets() []byte { return k.sub(storage.DataBucket, 0) }

// tuplePrefix is t/<bucket:4><space:4>: one space's tuples in one bucket.
func (k keys) tuplePrefix(b, space uint32) []byte {
	out := binary.BigEndian.AppendUint32(k.sub(storage.DataTuple, 8), b)
	return binary.BigEndian.AppendUint32(out, space)
}

// bucketTuples is t/<bucket:4>, bucketTombstones x/<bucket:4>, bucketCounts
// n/<bucket:4>: everything of one bucket.
func (k keys) bucketTuples(b uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataTuple, 4), b)
}

func (k keys) bucketTombstones(b uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataTombstone, 4), b)
}

func (k keys) bucketCounts(b uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataCount, 4), b)
}

// revision is r/<bucket:4>, revisions their prefix.
func (k keys) revision(b uint32) []byte {
	return binary.BigEndian.AppendUint32(k.sub(storage.DataRevision, 4), b)
}

func (k keys) revisions() []byte { return k.sub(storage.DataRevision, 0) }

// bucketAt is where a tuple key (t/<bucket:4><space:4><key>) or an event
// key (e/<bucket:4><revision:8>) holds its bucket, tupleSpaceAt where a
// tuple key holds its space id; isTuple tells a tuple key of the two.
func (k keys) bucketAt() int           { return len(k.prefix) + 2 }
func (k keys) tupleSpaceAt() int       { return len(k.prefix) + 6 }
func (k keys) isTuple(key []byte) bool { return key[len(k.prefix)] == storage.DataTuple }

// tuple is t/<bucket:4><space:4><key>.
func (k keys) tuple(b, space uint32, key []byte) []byte {
	p := k.tuplePrefix(b, space)
	out := make([]byte, 0, len(p)+len(key))
	return append(append(out, p...), key...)
}

// tombstone is x/<bucket:4><space:4><key>.
func (k keys) tombstone(b, space uint32, key []byte) []byte {
	out := binary.BigEndian.AppendUint32(k.sub(storage.DataTombstone, 8+len(key)), b)
	out = binary.BigEndian.AppendUint32(out, space)
	return append(out, key...)
}

// count is n/<bucket:4><space:4>.
func (k keys) count(b, space uint32) []byte {
	out := binary.BigEndian.AppendUint32(k.sub(storage.DataCount, 8), b)
	return binary.BigEndian.AppendUint32(out, space)
}

func (k keys) counts() []byte { return k.sub(storage.DataCount, 0) }

// requestID is i/<ms:8><id:16>: a request id and its write's time.
func (k keys) requestID(ms int64, id []byte) []byte {
	out := binary.BigEndian.AppendUint64(k.sub(storage.DataRequestID, 8+len(id)), uint64(ms))
	return append(out, id...)
}

// requestRecord is j/<ms:8><index:8><chunk:4>: the request ids the chunk
// at place chunk of the copy entry at index brought, remembered at ms.
func (k keys) requestRecord(ms int64, index uint64, chunk uint32) []byte {
	out := binary.BigEndian.AppendUint64(k.sub(storage.DataRequestRecord, 20), uint64(ms))
	out = binary.BigEndian.AppendUint64(out, index)
	return binary.BigEndian.AppendUint32(out, chunk)
}

// requestRecords is the prefix of every record of copied request ids,
// and requestRecordsAt(ms) the first key of those remembered at ms or
// later.
func (k keys) requestRecords() []byte { return k.sub(storage.DataRequestRecord, 0) }

func (k keys) requestRecordsAt(ms int64) []byte {
	return binary.BigEndian.AppendUint64(k.sub(storage.DataRequestRecord, 8), uint64(ms))
}

// requestIDs is the prefix of every request id, and requestIDsAt(ms) the
// first key of those written at ms or later.
func (k keys) requestIDs() []byte { return k.sub(storage.DataRequestID, 0) }

func (k keys) requestIDsAt(ms int64) []byte {
	return binary.BigEndian.AppendUint64(k.sub(storage.DataRequestID, 8), uint64(ms))
}
