package rpccodec

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Name is the codec's name: protobuf's, as gRPC's default codec.
const Name = "proto"

// Codec is the codec; the zero value is ready.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// vtMessage is what vtprotobuf generates for our messages.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
	Reset()
}

// Encoded is a message already in protobuf's wire format, sent as it is
// (a stream's SendMsg takes it in place of the message): for a server
// that sends the same bytes on many streams, or builds a message from
// parts encoded once for all of them. It is only sent, never received.
type Encoded []byte

// Name implements encoding.CodecV2.
func (Codec) Name() string { return Name }

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(Encoded); ok {
		return mem.BufferSlice{mem.SliceBuffer(e)}, nil
	}
	m, ok := v.(vtMessage)
	if !ok {
		return marshalProto(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVT(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVT((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal implements encoding.CodecV2. Like proto.Unmarshal it replaces
// what v held; UnmarshalVT copies what it keeps, so the buffer is freed.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	var err error
	if m, ok := v.(vtMessage); ok {
		m.Reset()
		err = m.UnmarshalVT(buf.ReadOnlyData())
	} else {
		pm := messageOf(v)
		if pm == nil {
			return fmt.Errorf("rpccodec: cannot unmarshal into %T: not a protobuf message", v)
		}
		err = proto.Unmarshal(buf.ReadOnlyData(), pm)
	}
	if err != nil {
		return fmt.Errorf("rpccodec: decoding %T: %w", v, err)
	}
	return nil
}

func marshalProto(v any) (mem.BufferSlice, error) {
	pm := messageOf(v)
	if pm == nil {
		return nil, fmt.Errorf("rpccodec: cannot marshal %T: not a protobuf message", v)
	}
	buf, err := proto.Marshal(pm)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV2:
		return v
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	}
	return nil
}
