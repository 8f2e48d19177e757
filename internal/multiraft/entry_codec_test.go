package multiraft

import (
	"bytes"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// An entry from the fuzzer's bytes: which fields are set, their values,
// and unknown fields (any bytes that parse as protobuf fields outside 1-4).
func fuzzEntry(set uint8, typ int32, term, index uint64, data []byte, unknown []byte) *raftpb.Entry {
	e := &raftpb.Entry{}
	if set&1 != 0 {
		t := raftpb.EntryType(typ)
		e.Type = &t
	}
	if set&2 != 0 {
		e.Term = &term
	}
	if set&4 != 0 {
		e.Index = &index
	}
	if set&8 != 0 {
		e.Data = data
		if e.Data == nil {
			e.Data = []byte{} // set and empty
		}
	}
	if set&16 != 0 {
		// Field 9, bytes: an unknown field as a newer raft might write.
		u := protowire.AppendTag(nil, 9, protowire.BytesType)
		e.ProtoReflect().SetUnknown(protowire.AppendBytes(u, unknown))
	}
	return e
}

// The hand encoder writes what proto.Marshal writes, for any entry: so
// every log, old or new, is read back by proto.Unmarshal the same way.
func FuzzTheEntryEncodingIsProtobufs(f *testing.F) {
	f.Add(uint8(0), int32(0), uint64(0), uint64(0), []byte(nil), []byte(nil))
	f.Add(uint8(15), int32(0), uint64(3), uint64(17), []byte("proposal"), []byte(nil))
	f.Add(uint8(7), int32(2), uint64(1<<63), uint64(1<<40), []byte(nil), []byte(nil))
	f.Add(uint8(9), int32(-1), uint64(1), uint64(1), []byte{}, []byte(nil))
	f.Add(uint8(31), int32(1), uint64(5), uint64(6), []byte{0, 1, 2}, []byte("later"))
	f.Fuzz(func(t *testing.T, set uint8, typ int32, term, index uint64, data, unknown []byte) {
		e := fuzzEntry(set, typ, term, index, data, unknown)
		want, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got := appendEntry(nil, e)
		if !bytes.Equal(got, want) {
			t.Fatalf("entry %v: encoded %x, proto.Marshal %x", e, got, want)
		}
		if n := entrySize(e); n != len(want) {
			t.Fatalf("entry %v: size %d, encoding %d bytes", e, n, len(want))
		}
		back := &raftpb.Entry{}
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, e) {
			t.Fatalf("entry %v: read back %v (%v)", e, back, err)
		}
	})
}
