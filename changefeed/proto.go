package changefeed

import (
	"fmt"
	"time"

	changefeedv1 "github.com/shardkit/shardkit/api/changefeed/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// appendProto appends r's protobuf value (changefeedv1.Record).
func appendProto(dst []byte, r *Record) []byte {
	m := &changefeedv1.Record{Space: r.Space, Kind: string(r.Kind), KeyJson: string(tuple.AppendJSON(nil, r.Key)),
		Version: r.Version, Bucket: r.Bucket, Revision: r.Revision, Index: uint32(r.Index), Changes: uint32(r.Changes),
		TimeUnixMs: r.Time.UnixMilli()}
	if r.Tuple != nil {
		m.TupleJson = string(tuple.AppendJSON(nil, r.Tuple))
	}
	b, err := m.MarshalVT()
	if err != nil {
		panic(err) // a message of strings and numbers always marshals
	}
	return append(dst, b...)
}

// ParseProtoRecord reads a record's protobuf value back, as ParseRecord
// reads the JSON one. A refusal names what was wrong.
func ParseProtoRecord(value []byte) (Record, error) {
	var m changefeedv1.Record
	if err := m.UnmarshalVT(value); err != nil {
		return Record{}, fmt.Errorf("changefeed record: not the protobuf of a record: %w", err)
	}
	r := Record{Space: m.GetSpace(), Version: m.GetVersion(), Bucket: m.GetBucket(), Revision: m.GetRevision(),
		Index: int(m.GetIndex()), Changes: int(m.GetChanges()), Time: time.UnixMilli(m.GetTimeUnixMs()).UTC()}
	var ok bool
	if r.Kind, ok = kinds[m.GetKind()]; !ok {
		return Record{}, fmt.Errorf("changefeed record: kind %q is none of insert, replace, update, upsert, delete, scan", m.GetKind())
	}
	if m.GetIndex() >= m.GetChanges() {
		return Record{}, fmt.Errorf("changefeed record: index %d is not in 0..changes-1 (changes %d)", m.GetIndex(), m.GetChanges())
	}
	var err error
	if r.Key, err = tuple.ParseJSONArgs([]byte(m.GetKeyJson())); err != nil {
		return Record{}, fmt.Errorf("changefeed record: key_json: %w", err)
	}
	if len(r.Key) == 0 {
		return Record{}, fmt.Errorf("changefeed record: an empty key")
	}
	if m.GetTupleJson() != "" {
		if r.Tuple, err = tuple.ParseJSONArgs([]byte(m.GetTupleJson())); err != nil {
			return Record{}, fmt.Errorf("changefeed record: tuple_json: %w", err)
		}
	}
	if (r.Tuple == nil) != (r.Kind == client.ChangeDelete) {
		return Record{}, fmt.Errorf("changefeed record: a %s with%s a tuple (a delete has none, every other kind one)",
			r.Kind, map[bool]string{true: "out", false: ""}[r.Tuple == nil])
	}
	return r, nil
}
