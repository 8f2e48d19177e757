// Package rpccodec is the gRPC codec of every shardkit connection, client
// and server: protobuf, encoded and decoded by the methods vtprotobuf
// generates next to each message of ours (SizeVT, MarshalToSizedBufferVT,
// UnmarshalVT: straight-line code, no reflection), and by the standard
// protobuf runtime for any other message (raft's).
//
// It owns only the choice of encoder: the bytes on the wire are protobuf
// either way, under the same codec name ("proto"), so a peer with gRPC's
// default codec understands them, with one exception: the generated
// encoders do not check that strings are valid UTF-8, which the standard
// runtime refuses to send or to receive (the strings of our answers are
// names checked where they were stored, or what the caller itself sent).
// The
// generated decoders are more lenient than the standard runtime with
// malformed input, and stricter in one case, all pinned by
// FuzzTheCodecAgreesWithProtobuf: they accept invalid UTF-8 in a string
// field (every name that is stored is checked where it is applied:
// spaces, users, instances), a varint of ten bytes whose last overflows
// (the overflow is dropped), and malformed unknown fields (kept as unknown
// bytes, which no code reads); they refuse a known field sent with
// another wire type, which the standard runtime keeps as unknown. A bytes
// field sent empty decodes to an empty slice, not nil (no code tells them
// apart; encoders omit both). Whatever they accept is a message our code
// validates as any other.
//
// It must never change a message's meaning, keep a reference to a buffer
// it was handed after it returns, or be registered globally (a program
// that imports the client keeps gRPC's own codec for its other
// connections): client.DialOptions and the instance's server ask for it.
package rpccodec
