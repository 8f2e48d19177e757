// Package tuple is shardkit's data model, shared by the server and the
// public Go client: typed values and tuples, the order-preserving key
// encoding the server's keys (and the buckets of sharding keys) are made
// of, and the compact tuple encoding of stored values and of the wire.
//
// It owns: the values (Value, its kinds and their total order), the key
// encoding (AppendKey, DecodeKey), the tuple encoding (AppendTuple,
// DecodeTuple, DecodeField), formats (Field, Format, Check), the JSON
// form of tuples and keys used by the CLI and the HTTP API
// (ParseJSONTuple, ParseJSONKey, AppendJSON), Tarantool's update ops
// (Op, ApplyOps, ParseJSONOps, and their frozen encoding AppendOps,
// DecodeOps), the limits (MaxFields, MaxKeyParts, MaxKeyBytes, MaxNameLen,
// MaxOps), the refusals (Error and its classes).
//
// It must never do I/O or hold package-level mutable state, and it must
// never change an encoding once released: data on disk, in Raft logs and
// in bucket placement depend on them byte for byte. A new encoding would
// be a new format with a new tag, never a change to an old one. It imports
// only the standard library.
//
// # Values
//
// A Value is null, a boolean, an integer (KindInt for negative numbers,
// KindUint for the others, so that an integer and an unsigned field
// holding the same number hold the same value), a double, a string, a byte
// string or a UUID. Values are canonical (one zero, one NaN among doubles)
// and compare equal exactly when they are ==. Compare orders them totally:
//
//	null < false < true < negative integers < non-negative integers
//	     < doubles (NaN last) < strings < bytes < UUIDs
//
// # Keys
//
// AppendKey encodes a key so that bytewise order is CompareKeys order; its
// documentation gives the encoding byte for byte. A key holds at most
// MaxKeyParts values and no NaN; a primary key encodes to at most
// MaxKeyBytes (EncodeKey), in reads and writes alike.
//
// # Tuples
//
// AppendTuple encodes a tuple compactly (a field count, then a tag and a
// payload per field); its documentation gives the encoding byte for byte.
// Every tuple has exactly one encoding and DecodeTuple accepts nothing
// else, so encoded tuples can be compared and hashed as bytes. The
// decoders never panic and never allocate more than their input warrants,
// whatever bytes they are given.
//
// # Formats
//
// A Format declares a space's fields: a name, a Type and whether the field
// is nullable. Format.Check says whether a tuple fits: each formatted
// field of its type, missing only at the end and only if nullable, any
// value beyond the format; a string, in the format or beyond it, must be
// valid UTF-8 (bytes fields hold bytes), so that no two inputs are stored
// as one string. Types are strict (a double field takes no
// integer); the JSON parsers convert numbers to the field's type.
//
// # JSON
//
// A tuple or key is a JSON array. ParseJSONTuple converts each element by
// its field's declaration: integers exactly (never through float64),
// bytes from base64, UUIDs from their 8-4-4-4-12 form; elements beyond the
// format are inferred. A string that is not valid UTF-8, or has an escaped
// surrogate that is not half of a pair, is refused (encoding/json would
// read both as U+FFFD). AppendJSON writes what ParseJSONTuple reads back
// as the same tuple. ParseJSONArgs reads a procedure's arguments.
//
// # Update ops
//
// An update is a list of Tarantool's ops (= + - & | ^ ! # :), and max and
// min (the greater or lesser of the field and a value, by Compare), on
// fields named or numbered (1-based, negative from the end). ApplyOps applies
// them in order to a copy of a tuple and checks the result against the
// format: integer arithmetic is exact and refuses overflow, a double on
// either side makes a double, an unsigned field driven negative is
// refused. A value given in JSON for a negative field number is converted
// by the field it lands on when the op is applied (Op.Convert), since only
// then is the tuple's length known. AppendOps and DecodeOps carry an
// update in a Raft command.
//
// # Refusals
//
// Every error is an *Error: its message names what was wrong and where
// (the op, the field by 1-based number and name, the expected type, what
// was given), its Class (ErrMismatch, ErrMalformed, ...) classifies it for
// errors.Is, and its Op, Field and Name fields place it for callers that
// map it to a gRPC status.
package tuple
