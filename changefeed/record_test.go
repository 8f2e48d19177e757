package changefeed

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

func sameRecord(a, b Record) bool {
	return a.Space == b.Space && a.Kind == b.Kind && a.Key.Equal(b.Key) && a.Tuple.Equal(b.Tuple) && (a.Tuple == nil) == (b.Tuple == nil) &&
		a.Version == b.Version && a.Bucket == b.Bucket && a.Revision == b.Revision && a.Index == b.Index &&
		a.Changes == b.Changes && a.Time.Equal(b.Time)
}

// A record's JSON and protobuf values read back as the record.
func TestRecordValuesReadBack(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 123e6, time.UTC)
	for _, r := range []Record{
		{Space: "o", Kind: client.ChangeReplace, Key: tuple.Tuple{tuple.Int(-3), tuple.String("a\"b")},
			Tuple:   tuple.Tuple{tuple.Int(-3), tuple.String("a\"b"), tuple.Double(1), tuple.Null(), tuple.Bool(true)},
			Version: 1 << 48, Bucket: 7, Revision: 12, Index: 1, Changes: 2, Time: at},
		{Space: "o", Kind: client.ChangeDelete, Key: tuple.Tuple{tuple.Uint(1 << 63)}, Version: 5, Bucket: 1, Revision: 1, Changes: 1, Time: at},
		{Space: "o", Kind: client.ChangeScan, Key: tuple.Tuple{tuple.Int(4)}, Tuple: tuple.Tuple{tuple.Int(4), tuple.String("x")},
			Version: 9, Bucket: 2, Revision: 30, Index: 1004, Changes: 1005, Time: at},
	} {
		got, err := ParseRecord(appendJSON(nil, &r))
		if err != nil || !sameRecord(got, r) {
			t.Errorf("JSON %s read back as %+v, %v", appendJSON(nil, &r), got, err)
		}
		got, err = ParseProtoRecord(appendProto(nil, &r))
		if err != nil || !sameRecord(got, r) {
			t.Errorf("protobuf of %+v read back as %+v, %v", r, got, err)
		}
	}
}

// ParseRecord's refusals name what was wrong.
func TestParseRecordRefusals(t *testing.T) {
	ok := `"space":"o","key":[1],"version":1,"bucket":1,"revision":1,"index":0,"changes":1,"time":"2026-01-01T00:00:00Z"`
	for value, want := range map[string]string{
		`{` + ok + `,"kind":"insert","tuple":[1]}`:                                               "",
		`{` + ok + `,"kind":"insert"}`:                                                           "a insert without a tuple",
		`{` + ok + `,"kind":"delete","tuple":[1]}`:                                               "a delete with a tuple",
		`{` + ok + `,"kind":"merge","tuple":[1]}`:                                                `kind "merge"`,
		`{` + ok + `,"kind":"insert","extra":1}`:                                                 `unknown field "extra"`,
		`{"space":"o","kind":"insert","tuple":[1]}`:                                              `no "`,
		`{` + ok + `,"kind":"insert","tuple":[1]} {}`:                                            "something follows",
		`{` + strings.Replace(ok, `"index":0`, `"index":1`, 1) + `,"kind":"insert","tuple":[1]}`: "index 1 is not in 0..changes-1",
		`{` + strings.Replace(ok, `[1]`, `[]`, 1) + `,"kind":"insert","tuple":[1]}`:              "an empty key",
		`{` + strings.Replace(ok, `[1]`, `[[1]]`, 1) + `,"kind":"insert","tuple":[1]}`:           "key:",
	} {
		_, err := ParseRecord([]byte(value))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", value, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want a refusal with %q", value, err, want)
		}
	}
}

// FuzzParseRecord: ParseRecord refuses or returns a record whose JSON
// reads back as the same record.
func FuzzParseRecord(f *testing.F) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	f.Add(appendJSON(nil, &Record{Space: "o", Kind: client.ChangeInsert, Key: tuple.Tuple{tuple.Int(1)},
		Tuple: tuple.Tuple{tuple.Int(1), tuple.Double(2.5), tuple.String("x")}, Bucket: 3, Revision: 4, Changes: 1, Time: at}))
	f.Add(appendJSON(nil, &Record{Space: "o", Kind: client.ChangeDelete, Key: tuple.Tuple{tuple.String("k")}, Changes: 1, Time: at}))
	f.Add([]byte(`{"space":"o"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		r, err := ParseRecord(value)
		if err != nil {
			return
		}
		again, err := ParseRecord(appendJSON(nil, &r))
		if err != nil {
			t.Fatalf("%s: its record %+v writes a value that is refused: %v", value, r, err)
		}
		if !sameRecord(again, r) {
			t.Fatalf("%s: read %+v, written and read again %+v", value, r, again)
		}
	})
}

// FuzzParseProtoRecord: ParseProtoRecord refuses or returns a record whose
// value reads back as the same record.
func FuzzParseProtoRecord(f *testing.F) {
	f.Add(appendProto(nil, &Record{Space: "o", Kind: client.ChangeUpdate, Key: tuple.Tuple{tuple.Int(1)},
		Tuple: tuple.Tuple{tuple.Int(1)}, Bucket: 3, Revision: 4, Changes: 1, Time: time.UnixMilli(5)}))
	f.Add([]byte{0x0a, 0x01})
	f.Fuzz(func(t *testing.T, value []byte) {
		r, err := ParseProtoRecord(value)
		if err != nil {
			return
		}
		again, err := ParseProtoRecord(appendProto(nil, &r))
		if err != nil {
			t.Fatalf("its record %+v writes a value that is refused: %v", r, err)
		}
		if !sameRecord(again, r) {
			t.Fatalf("read %+v, written and read again %+v", r, again)
		}
	})
}

// A bucket's cursor moves over an event only when its records and every
// earlier event's are acknowledged, whatever the order of the acks; each
// event with its every record acknowledged is reported once to Sent (a
// scan's page, with no commit time, is not).
func TestAcksMoveTheCursorOverAcknowledgedEventsOnly(t *testing.T) {
	var sent []uint64
	a := newAcks(map[uint32]uint64{1: 10, 2: 3}, func(_ uint32, rev uint64, _ time.Time) { sent = append(sent, rev) })
	now := time.Now()
	e11 := a.add(1, 11, 2, now)
	e12 := a.add(1, 12, 1, now)
	e4 := a.add(2, 4, 1, now)
	scan := a.add(3, 0, 1, time.Time{})
	a.ack(3, scan, nil)
	at := func(b uint32) uint64 {
		c, _ := a.cursor()
		r, _ := c.Revision(b)
		return r
	}
	a.ack(1, e12, nil)
	a.ack(1, e11, nil)
	if at(1) != 10 {
		t.Fatalf("bucket 1 at %d with one record of revision 11 unacknowledged, want 10", at(1))
	}
	a.ack(1, e11, nil)
	if at(1) != 12 || at(2) != 3 {
		t.Fatalf("buckets at %d and %d, want 12 and 3", at(1), at(2))
	}
	if fmt.Sprint(sent) != "[12 11]" {
		t.Fatalf("events reported sent: %v, want [12 11] (as their last records were acknowledged)", sent)
	}
	a.ack(2, e4, errTest)
	if _, err := a.cursor(); !errors.Is(err, errTest) || at(2) != 3 {
		t.Fatalf("after a refused record: bucket 2 at %d, error %v; want 3 and the refusal", at(2), err)
	}
}

var errTest = errorString("refused")

type errorString string

func (e errorString) Error() string { return string(e) }

// A part's saved state splits back into its cursor and its scan's
// progress; a progress that is not one is refused, naming what was wrong.
func TestSavedScanProgress(t *testing.T) {
	cur := client.NewCursor(map[uint32]uint64{3: 7, 4: 0})
	pending := map[uint32]*scanPos{4: {Space: "o", After: tuple.AppendTuple(nil, tuple.Tuple{tuple.Uint(9)}), Next: 12}}
	text, pend, err := splitSaved(joinSaved(cur, pending))
	if err != nil || text != cur.String() || len(pend) != 1 || pend[4].Space != "o" || pend[4].Next != 12 ||
		!bytes.Equal(pend[4].After, pending[4].After) {
		t.Fatalf("split back: %q %v %v", text, pend, err)
	}
	if text, pend, err := splitSaved(joinSaved(cur, nil)); err != nil || text != cur.String() || pend != nil {
		t.Fatalf("no scan: %q %v %v", text, pend, err)
	}
	for state, want := range map[string]string{
		"[1]":               "is not its JSON",
		`{"x":{}}`:          "is not its JSON",
		`{"4":null}`:        "bucket 4 is <nil>",
		`{"4":{"next":-1}}`: "bucket 4 is",
	} {
		if _, _, err := splitSaved(cur.String() + scanSep + state); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", state, err, want)
		}
	}
}
