package changefeed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The headers of every record: the bucket, its revision, the change's
// index among the event's changes (0-based) and their number, each as a
// decimal string. (bucket, revision, index) names a record: a consumer
// that keeps the last (revision, index) applied of each bucket drops the
// repeats a restarted feed sends.
const (
	HeaderBucket   = "shardkit-bucket"
	HeaderRevision = "shardkit-revision"
	HeaderIndex    = "shardkit-index"
	HeaderChanges  = "shardkit-changes"
)

// Record is one change as the feed writes it to Kafka (the JSON value;
// the protobuf value carries the same fields).
type Record struct {
	Space string
	Kind  client.ChangeKind
	// Key is the tuple's primary key.
	Key tuple.Tuple
	// Tuple is the tuple after the change (nil for a delete).
	Tuple   tuple.Tuple
	Version uint64
	Bucket  uint32
	// Revision is the bucket's revision of the batch; Index the change's
	// place among the batch's Changes changes (0-based). A record of the
	// initial scan (Kind client.ChangeScan) has the revision the feed's
	// watch of its bucket began at, its place in the bucket's scan as
	// Index (rising, with gaps where a process took a scan over) and
	// Index+1 as Changes.
	Revision uint64
	Index    int
	Changes  int
	// Time is the leader-stamped time of the batch (of a scan record: when
	// it was read).
	Time time.Time
}

// appendJSON appends r's JSON value: {"space":S,"kind":K,"key":[...],
// "tuple":[...],"version":V,"bucket":B,"revision":R,"index":I,
// "changes":N,"time":T}, tuples as tuple.AppendJSON writes them, no
// "tuple" for a delete.
func appendJSON(dst []byte, r *Record) []byte {
	dst = append(dst, `{"space":`...)
	dst = strconv.AppendQuote(dst, r.Space)
	dst = append(dst, `,"kind":`...)
	dst = strconv.AppendQuote(dst, string(r.Kind))
	dst = append(dst, `,"key":`...)
	dst = tuple.AppendJSON(dst, r.Key)
	if r.Tuple != nil {
		dst = append(dst, `,"tuple":`...)
		dst = tuple.AppendJSON(dst, r.Tuple)
	}
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, r.Version, 10)
	dst = append(dst, `,"bucket":`...)
	dst = strconv.AppendUint(dst, uint64(r.Bucket), 10)
	dst = append(dst, `,"revision":`...)
	dst = strconv.AppendUint(dst, r.Revision, 10)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendInt(dst, int64(r.Index), 10)
	dst = append(dst, `,"changes":`...)
	dst = strconv.AppendInt(dst, int64(r.Changes), 10)
	dst = append(dst, `,"time":"`...)
	dst = r.Time.UTC().AppendFormat(dst, time.RFC3339Nano)
	return append(dst, `"}`...)
}

// jsonRecord is the shape ParseRecord reads.
type jsonRecord struct {
	Space    *string         `json:"space"`
	Kind     *string         `json:"kind"`
	Key      json.RawMessage `json:"key"`
	Tuple    json.RawMessage `json:"tuple"`
	Version  *uint64         `json:"version"`
	Bucket   *uint32         `json:"bucket"`
	Revision *uint64         `json:"revision"`
	Index    *int            `json:"index"`
	Changes  *int            `json:"changes"`
	Time     *time.Time      `json:"time"`
}

var kinds = map[string]client.ChangeKind{
	"insert": client.ChangeInsert, "replace": client.ChangeReplace, "update": client.ChangeUpdate,
	"upsert": client.ChangeUpsert, "delete": client.ChangeDelete, "scan": client.ChangeScan,
}

// ParseRecord reads a record's JSON value back. The key's and the tuple's
// values are typed as tuple.ParseJSONArgs infers them (integers, doubles,
// strings, booleans, null: bytes and UUIDs come as their strings; parse
// the raw arrays with tuple.ParseJSONTuple and the space's format for
// exact types). A refusal names what was wrong.
func ParseRecord(value []byte) (Record, error) {
	var j jsonRecord
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Record{}, fmt.Errorf("changefeed record: not the JSON of a record: %w", err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("changefeed record: something follows the record's object")
	}
	for name, missing := range map[string]bool{
		"space": j.Space == nil, "kind": j.Kind == nil, "key": j.Key == nil, "version": j.Version == nil,
		"bucket": j.Bucket == nil, "revision": j.Revision == nil, "index": j.Index == nil,
		"changes": j.Changes == nil, "time": j.Time == nil,
	} {
		if missing {
			return Record{}, fmt.Errorf("changefeed record: no %q", name)
		}
	}
	r := Record{Space: *j.Space, Version: *j.Version, Bucket: *j.Bucket, Revision: *j.Revision,
		Index: *j.Index, Changes: *j.Changes, Time: *j.Time}
	var ok bool
	if r.Kind, ok = kinds[*j.Kind]; !ok {
		return Record{}, fmt.Errorf("changefeed record: kind %q is none of insert, replace, update, upsert, delete, scan", *j.Kind)
	}
	if r.Index < 0 || r.Changes <= r.Index {
		return Record{}, fmt.Errorf("changefeed record: index %d is not in 0..changes-1 (changes %d)", r.Index, r.Changes)
	}
	var err error
	if r.Key, err = tuple.ParseJSONArgs(j.Key); err != nil {
		return Record{}, fmt.Errorf("changefeed record: key: %w", err)
	}
	if len(r.Key) == 0 {
		return Record{}, fmt.Errorf("changefeed record: an empty key")
	}
	if j.Tuple != nil {
		if r.Tuple, err = tuple.ParseJSONArgs(j.Tuple); err != nil {
			return Record{}, fmt.Errorf("changefeed record: tuple: %w", err)
		}
	}
	if (r.Tuple == nil) != (r.Kind == client.ChangeDelete) {
		return Record{}, fmt.Errorf("changefeed record: a %s with%s a tuple (a delete has none, every other kind one)",
			r.Kind, map[bool]string{true: "out", false: ""}[r.Tuple == nil])
	}
	return r, nil
}

// Position reads a record's headers: its bucket, revision and index. A
// refusal names the header that was missing or wrong.
func Position(rec *kgo.Record) (bucket uint32, revision uint64, index int, err error) {
	get := func(name string, bits int) (uint64, error) {
		for _, h := range rec.Headers {
			if h.Key == name {
				n, err := strconv.ParseUint(string(h.Value), 10, bits)
				if err != nil {
					return 0, fmt.Errorf("changefeed record: header %s %q is not a number of %d bits", name, h.Value, bits)
				}
				return n, nil
			}
		}
		return 0, fmt.Errorf("changefeed record: no header %s", name)
	}
	b, err := get(HeaderBucket, 32)
	if err != nil {
		return 0, 0, 0, err
	}
	r, err := get(HeaderRevision, 64)
	if err != nil {
		return 0, 0, 0, err
	}
	i, err := get(HeaderIndex, 31)
	if err != nil {
		return 0, 0, 0, err
	}
	return uint32(b), r, int(i), nil
}
