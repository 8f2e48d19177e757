package multiraft

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
func entrySize(e *raftpb.Entry) int { return entrySizeWithout(e, false) }

// entrySizeWithout is the length of e's encoding, without its data if
// noData (a sideloaded entry's, sideload.go).
func entrySizeWithout(e *raftpb.Entry, noData bool) int {
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
	if e.Data != nil && !noData {
		n += 1 + protowire.SizeBytes(len(e.Data))
	}
	return n + len(e.ProtoReflect().GetUnknown())
}

// appendEntry appends e's encoding to b.
func appendEntry(b []byte, e *raftpb.Entry) []byte { return appendEntryWithout(b, e, false) }

// appendEntryWithout appends e's encoding to b, without its data if noData.
func appendEntryWithout(b []byte, e *raftpb.Entry, noData bool) []byte {
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
	if e.Data != nil && !noData {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, e.Data)
	}
	return append(b, e.ProtoReflect().GetUnknown()...)
}

// unmarshalEntry decodes an entry's protobuf encoding into e.
func unmarshalEntry(v []byte, e *raftpb.Entry) error {
	if err := proto.Unmarshal(v, e); err != nil {
		return fmt.Errorf("not a raft entry: %w", err)
	}
	return nil
}
