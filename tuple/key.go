package tuple

import (
	"encoding/binary"
	"math"
)

// MaxKeyParts is the most values a key may have: AppendKey and DecodeKey
// refuse more, and so does an index definition on the server.
const MaxKeyParts = 16

// MaxKeyBytes is the most bytes a primary key may take in the key encoding
// (AppendKey). EncodeKey and ParseJSONKey refuse a longer key, and the
// server refuses one in every write and every read by key alike.
const MaxKeyBytes = 4 << 10

// EncodeKey returns the key encoding of a primary key (AppendKey), and
// refuses (ErrLimit) one that takes more than MaxKeyBytes.
func EncodeKey(parts ...Value) ([]byte, error) {
	kb, err := AppendKey(nil, parts...)
	if err != nil {
		return nil, err
	}
	if len(kb) > MaxKeyBytes {
		return nil, newError(ErrLimit, "a key of %d bytes is more than %d", len(kb), MaxKeyBytes)
	}
	return kb, nil
}

// Tags of the key encoding, in the order of Compare. Frozen.
const (
	tagNull   = 0x01
	tagFalse  = 0x02
	tagTrue   = 0x03
	tagNegInt = 0x04
	tagUint   = 0x05
	tagDouble = 0x06
	tagString = 0x07
	tagBytes  = 0x08
	tagUUID   = 0x09
)

// Escapes of strings and bytes in keys.
const (
	keyEscape     = 0x00 // first byte of both two-byte sequences
	keyEscapedNul = 0xff // 0x00 0xff: a 0x00 byte of the value
	keyTerminator = 0x01 // 0x00 0x01: the end of the value
)

// AppendKey appends the order-preserving encoding of a key (one or more
// values) to dst. For any keys a and b, bytes.Compare of their encodings
// has the sign of CompareKeys(a, b), and no value's encoding is a prefix of
// another's, so DecodeKey reads a key back and a key's encoding is a
// prefix of the encodings of the keys it is a prefix of (range scans).
//
// The encoding is frozen: the server's keys on disk and the bucket of
// every sharding key (sharding.BucketOf) depend on it. Each value is one
// tag byte and a payload:
//
//	0x01                  null
//	0x02                  false
//	0x03                  true
//	0x04 + 8 bytes        negative integer: int64 two's complement, big-endian
//	0x05 + 8 bytes        non-negative integer: uint64, big-endian
//	0x06 + 8 bytes        double: the IEEE 754 bits, big-endian, with every
//	                      bit flipped if the sign bit is set, else only the
//	                      sign bit flipped (-0 is encoded as +0; NaN refused)
//	0x07 + escaped + 0x00 0x01   string
//	0x08 + escaped + 0x00 0x01   bytes
//	0x09 + 16 bytes       UUID, as its 16 bytes
//
// where "escaped" is the value's bytes with each 0x00 written as 0x00 0xFF.
// An integer is encoded by its value alone, whatever type its field
// declares: Int(5) and Uint(5) are the same value and the same bytes.
//
// It fails only for a NaN (ErrNaN: keys must be totally ordered) and for
// more than MaxKeyParts values (ErrLimit); dst is then returned unchanged.
func AppendKey(dst []byte, parts ...Value) ([]byte, error) {
	if len(parts) > MaxKeyParts {
		return dst, newError(ErrLimit, "a key has %d parts; at most %d are allowed", len(parts), MaxKeyParts)
	}
	for i, v := range parts {
		if v.kind == KindDouble && v.num == canonicalNaN {
			return dst, fieldError(ErrNaN, "key part", i+1, "", "NaN cannot be part of a key")
		}
	}
	for _, v := range parts {
		dst = appendKeyValue(dst, v)
	}
	return dst, nil
}

func appendKeyValue(dst []byte, v Value) []byte {
	tag := v.rank()
	dst = append(dst, tag)
	switch tag {
	case tagNegInt, tagUint:
		dst = binary.BigEndian.AppendUint64(dst, v.num)
	case tagDouble:
		bits := v.num
		if bits&(1<<63) != 0 {
			bits = ^bits
		} else {
			bits ^= 1 << 63
		}
		dst = binary.BigEndian.AppendUint64(dst, bits)
	case tagString, tagBytes:
		s := v.str
		for {
			i := indexNul(s)
			if i < 0 {
				break
			}
			dst = append(dst, s[:i]...)
			dst = append(dst, keyEscape, keyEscapedNul)
			s = s[i+1:]
		}
		dst = append(dst, s...)
		dst = append(dst, keyEscape, keyTerminator)
	case tagUUID:
		dst = append(dst, v.str...)
	}
	return dst
}

func indexNul(s string) int {
	for i := range len(s) {
		if s[i] == 0 {
			return i
		}
	}
	return -1
}

// DecodeKey reads a key written by AppendKey. It refuses (ErrMalformed)
// anything AppendKey cannot have written: unknown tags, truncated values,
// bad escapes, a negative-integer tag with a non-negative payload, a NaN
// or -0 double; and more than MaxKeyParts values (ErrLimit). It never
// panics. An empty b is the empty key.
func DecodeKey(b []byte) ([]Value, error) {
	var key []Value
	pos := 0
	for pos < len(b) {
		n := len(key) + 1
		if n > MaxKeyParts {
			return nil, newError(ErrLimit, "the key has more than %d parts", MaxKeyParts)
		}
		v, next, err := decodeKeyValue(b, pos)
		if err != nil {
			return nil, fieldError(ErrMalformed, "key part", n, "", "%s at byte %d", err.msg, pos)
		}
		key = append(key, v)
		pos = next
	}
	return key, nil
}

// decodeKeyValue reads the value at b[pos:] and returns it with the
// position after it; its error is only a message for DecodeKey to place.
func decodeKeyValue(b []byte, pos int) (Value, int, *Error) {
	tag := b[pos]
	pos++
	switch tag {
	case tagNull:
		return Null(), pos, nil
	case tagFalse, tagTrue:
		return Bool(tag == tagTrue), pos, nil
	case tagNegInt, tagUint, tagDouble:
		if len(b)-pos < 8 {
			return Value{}, 0, newError(ErrMalformed, "truncated %s (tag 0x%02x)", tagName(tag), tag)
		}
		u := binary.BigEndian.Uint64(b[pos:])
		pos += 8
		switch tag {
		case tagNegInt:
			if int64(u) >= 0 {
				return Value{}, 0, newError(ErrMalformed, "non-negative number %d under the negative integer tag", int64(u))
			}
			return Int(int64(u)), pos, nil
		case tagUint:
			return Uint(u), pos, nil
		}
		if u&(1<<63) != 0 {
			u ^= 1 << 63
		} else {
			u = ^u
		}
		f := math.Float64frombits(u)
		if f != f || u == 1<<63 {
			return Value{}, 0, newError(ErrMalformed, "a NaN or -0 double, which no key holds")
		}
		return Double(f), pos, nil
	case tagString, tagBytes:
		s, next, ok := unescapeKeyString(b, pos)
		if !ok {
			return Value{}, 0, newError(ErrMalformed, "%s without a valid end (0x00 0x01) or with a bad escape", tagName(tag))
		}
		if tag == tagString {
			return String(s), next, nil
		}
		return Value{kind: KindBytes, str: s}, next, nil
	case tagUUID:
		if len(b)-pos < 16 {
			return Value{}, 0, newError(ErrMalformed, "truncated uuid (tag 0x09)")
		}
		return Value{kind: KindUUID, str: string(b[pos : pos+16])}, pos + 16, nil
	}
	return Value{}, 0, newError(ErrMalformed, "unknown tag 0x%02x", tag)
}

func tagName(tag byte) string {
	switch tag {
	case tagNegInt:
		return "negative integer"
	case tagUint:
		return "non-negative integer"
	case tagDouble:
		return "double"
	case tagString:
		return "string"
	case tagBytes:
		return "bytes"
	}
	return "value"
}

// unescapeKeyString reads an escaped string or bytes value starting at
// b[pos] and returns it and the position after its terminator.
func unescapeKeyString(b []byte, pos int) (string, int, bool) {
	// Fast path: no escaped 0x00 inside.
	for i := pos; i < len(b); i++ {
		if b[i] != keyEscape {
			continue
		}
		if i+1 < len(b) && b[i+1] == keyTerminator {
			return string(b[pos:i]), i + 2, true
		}
		break
	}
	var out []byte
	for i := pos; i < len(b); i++ {
		if b[i] != keyEscape {
			out = append(out, b[i])
			continue
		}
		if i+1 >= len(b) {
			return "", 0, false
		}
		switch b[i+1] {
		case keyTerminator:
			return string(out), i + 2, true
		case keyEscapedNul:
			out = append(out, 0)
			i++
		default:
			return "", 0, false
		}
	}
	return "", 0, false
}
