package multiraft

import (
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
)

// A log entry is stored as its protobuf encoding: byte for byte what
// proto.Marshal gives (raftpb.Entry's fields in number order, then any
// unknown fields it carries), so stored entries are read back with
// proto.Unmarshal.
// entrySize and appendEntry write it by hand, straight into the round's
// batch (logStore.stageAppend), instead of through the protobuf runtime's
// reflection and a buffer per entry: every member encodes every entry
// it appends. FuzzTheEntryEncodingIsProtobufs holds them to proto.Marshal.

// entrySize is the length of e's encoding.
func entrySize(e *raftpb.Entry) int {
	n := 0
	if e.Type != nil {
		n += 1 + protowire.SizeVarint(uint64(*e.Type)) // an enum: its int32 sign-extended
	}
	if e.Term != nil {
		n += 1 + protowire.SizeVarint(*e.Term)
	}
	if e.Index != nil {
		n += 1 + protowire.SizeVarint(*e.Index)
	}
	if e.Data != nil {
		n += 1 + protowire.SizeBytes(len(e.Data))
	}
	return n + len(e.ProtoReflect().GetUnknown())
}

// appendEntry appends e's encoding to b.
func appendEntry(b []byte, e *raftpb.Entry) []byte {
	if e.Type != nil {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(*e.Type))
	}
	if e.Term != nil {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, *e.Term)
	}
	if e.Index != nil {
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, *e.Index)
	}
	if e.Data != nil {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Data)
	}
	return append(b, e.ProtoReflect().GetUnknown()...)
}
