package rpccodec_test

import (
	"bytes"
	"strings"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	raftv1 "github.com/shardkit/shardkit/api/raft/v1"
	"github.com/shardkit/shardkit/api/rpccodec"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/replicaset/rspb"
)

// The messages the fuzz test decodes: what instances receive from clients
// and from each other, and what the replicasets log.
var kinds = []func() proto.Message{
	func() proto.Message { return &datav1.StreamRequest{} },
	func() proto.Message { return &datav1.StreamResponse{} },
	func() proto.Message { return &datav1.WriteRequest{} },
	func() proto.Message { return &datav1.MultiRequest{} },
	func() proto.Message { return &datav1.CallRequest{} },
	func() proto.Message { return &rspb.Command{} },
	func() proto.Message { return &rspb.BatchResult{} },
	func() proto.Message { return &rspb.SendBucketsResponse{} },
	func() proto.Message { return &raftv1.RaftMessagesRequest{} },
	func() proto.Message { return &clusterv1.CreateUserRequest{} },
	func() proto.Message { return &metapb.Instance{} },
}

func unmarshal(data []byte, m proto.Message) error {
	return rpccodec.Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, m)
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	bs, err := rpccodec.Codec{}.Marshal(m)
	if err != nil {
		t.Fatalf("marshal %T: %v", m, err)
	}
	defer bs.Free()
	return bs.Materialize()
}

// known is a copy of m without unknown fields, at any depth.
func known(m proto.Message) proto.Message {
	c := proto.Clone(m)
	var drop func(protoreflect.Message)
	drop = func(m protoreflect.Message) {
		m.SetUnknown(nil)
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					drop(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					drop(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				drop(v.Message())
			}
			return true
		})
	}
	drop(c.ProtoReflect())
	return c
}

// hasUnknown tells whether m or a message in it kept unknown fields.
func hasUnknown(m protoreflect.Message) bool {
	if len(m.GetUnknown()) > 0 {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				found = found || hasUnknown(v.List().Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				found = found || hasUnknown(mv.Message())
				return !found
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			found = hasUnknown(v.Message())
		}
		return !found
	})
	return found
}

// FuzzTheCodecAgreesWithProtobuf: whatever bytes arrive, the codec does
// not panic; what the standard protobuf runtime accepts it decodes to the
// same message (or refuses, when a known field has the wrong wire type);
// what it accepts beyond that (the leniencies in doc.go) it encodes back
// to the same message, and as valid protobuf unless the message kept
// invalid UTF-8 or unknown fields.
func FuzzTheCodecAgreesWithProtobuf(f *testing.F) {
	for i := range kinds {
		f.Add(byte(i), []byte{})
		f.Add(byte(i), []byte{0x0a, 0x03, 'a', 'b', 'c', 0x10, 0x07, 0x1a, 0x02, 0x08, 0x01})
		f.Add(byte(i), []byte{0x0a, 0x02, 0xff, 0xfe, 0x22, 0x04, 0x0a, 0x02, 0x10, 0x01})
		f.Add(byte(i), []byte{0x12, 0x05, 0x0a, 0x01, 'x', 0x10, 0x02, 0x30, 0x80, 0x01})
	}
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		newMsg := kinds[int(kind)%len(kinds)]
		want, got := newMsg(), newMsg()
		perr := proto.Unmarshal(data, want)
		verr := unmarshal(data, got)
		same := func(a, b proto.Message) bool {
			// Unknown fields are compared by presence: an overlong tag is
			// kept as sent by one runtime, re-encoded by the other.
			return proto.Equal(known(a), known(b)) && hasUnknown(a.ProtoReflect()) == hasUnknown(b.ProtoReflect())
		}
		if perr == nil {
			// What protobuf accepts, the codec decodes alike.
			switch {
			case verr != nil && !strings.Contains(verr.Error(), "wrong wireType"):
				t.Fatalf("%T: protobuf decodes %x, the codec refuses it: %v", want, data, verr)
			case verr == nil && !same(want, got):
				t.Fatalf("%T: %x decodes to\n%v\nby the codec, to\n%v\nby protobuf", want, data, got, want)
			}
		}
		if verr != nil {
			return
		}
		// What the codec accepts it encodes as it decoded it, and as valid
		// protobuf, unless it kept what it was lenient about.
		enc := marshal(t, got)
		again := newMsg()
		if err := unmarshal(enc, again); err != nil || !same(again, got) {
			t.Fatalf("%T: encoded and decoded again: %v (%v), want %v", got, again, err, got)
		}
		if err := proto.Unmarshal(enc, newMsg()); err != nil && !strings.Contains(err.Error(), "UTF-8") && !hasUnknown(got.ProtoReflect()) {
			t.Fatalf("%T: %x decodes to %v, which the codec encodes as %x, which protobuf refuses: %v", got, data, got, enc, err)
		}
	})
}

// Decoding replaces what the message held, as proto.Unmarshal does; a
// message without generated code (raft's) takes the standard runtime; a
// value that is no message is refused, naming its type.
func TestDecodingReplacesAndOtherMessagesTakeTheStandardPath(t *testing.T) {
	in := &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{RequestId: []byte("r1"), Bucket: 7}}}
	out := &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{Bucket: 9, PrevGeneration: 3}}}
	if err := unmarshal(marshal(t, in), out); err != nil || !proto.Equal(in, out) {
		t.Fatalf("decoded into a used message: %v (%v), want %v", out, err, in)
	}
	msg := &raftpb.Message{Type: raftpb.MsgApp.Enum(), To: proto.Uint64(2), From: proto.Uint64(1), Index: proto.Uint64(41),
		Entries: []*raftpb.Entry{{Index: proto.Uint64(42), Term: proto.Uint64(3), Data: []byte("x")}}}
	var back raftpb.Message
	if err := unmarshal(marshal(t, msg), &back); err != nil || !proto.Equal(msg, &back) {
		t.Fatalf("raft message round trip: %v (%v), want %v", &back, err, msg)
	}
	if _, err := (rpccodec.Codec{}).Marshal(struct{}{}); err == nil || !strings.Contains(err.Error(), "struct {}") {
		t.Fatalf("marshal of a non-message: %v, want a refusal naming struct {}", err)
	}
	if err := (rpccodec.Codec{}).Unmarshal(nil, new(int)); err == nil || !strings.Contains(err.Error(), "*int") {
		t.Fatalf("unmarshal into a non-message: %v, want a refusal naming *int", err)
	}
}

// An Encoded message is sent as the bytes it is: a message built from
// parts encoded apart (fields of a message may come in any order, and a
// repeated field's elements one by one) decodes as the whole.
func TestAnEncodedMessageIsSentAsItIs(t *testing.T) {
	in := &rspb.Command{Op: &rspb.Command_Batch{Batch: &rspb.Batch{RequestId: []byte("r1"), Bucket: 7}}}
	enc := marshal(t, in)
	out, err := (rpccodec.Codec{}).Marshal(rpccodec.Encoded(enc))
	if err != nil || !bytes.Equal(out.Materialize(), enc) {
		t.Fatalf("Encoded(%x) is sent as %x (%v)", enc, out.Materialize(), err)
	}
	var back rspb.Command
	if err := unmarshal(out.Materialize(), &back); err != nil || !proto.Equal(in, &back) {
		t.Fatalf("decoded %v (%v), want %v", &back, err, in)
	}
}
