package tuple

import (
	"encoding/binary"
	"math"
)

// MaxFields is the most fields a tuple may have, and the most fields a
// Format may declare. DecodeTuple and Format.Check refuse more. There is no
// limit of its own on the length of a string or byte string: the server
// limits the size of a whole tuple.
const MaxFields = 1000

// AppendTuple appends the compact encoding of t to dst: the tuple codec of
// the server's stored values and of the wire between client and server.
//
// The encoding is frozen. It is the number of fields as a uvarint, then
// each field as a tag byte (the same tags as the key encoding) and a
// payload:
//
//	0x01                  null
//	0x02                  false
//	0x03                  true
//	0x04 + uvarint        negative integer n, as the uvarint of -(n+1)
//	0x05 + uvarint        non-negative integer
//	0x06 + 8 bytes        double: the IEEE 754 bits, little-endian (one NaN,
//	                      0x7ff8000000000000; no -0)
//	0x07 + uvarint + data string: its length in bytes, then the bytes
//	0x08 + uvarint + data bytes: likewise
//	0x09 + 16 bytes       UUID
//
// Uvarints are those of encoding/binary, always in their shortest form.
// Each tuple has exactly one encoding, and DecodeTuple accepts only that
// one. AppendTuple does not check MaxFields: a tuple that Format.Check
// accepts has at most MaxFields fields, and DecodeTuple refuses more.
func AppendTuple(dst []byte, t Tuple) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(t)))
	for _, v := range t {
		dst = appendValue(dst, v)
	}
	return dst
}

// appendValue appends one value as the tuple codec writes a field.
func appendValue(dst []byte, v Value) []byte {
	tag := v.rank()
	dst = append(dst, tag)
	switch tag {
	case tagNegInt:
		dst = binary.AppendUvarint(dst, ^v.num)
	case tagUint:
		dst = binary.AppendUvarint(dst, v.num)
	case tagDouble:
		dst = binary.LittleEndian.AppendUint64(dst, v.num)
	case tagString, tagBytes:
		dst = binary.AppendUvarint(dst, uint64(len(v.str)))
		dst = append(dst, v.str...)
	case tagUUID:
		dst = append(dst, v.str...)
	}
	return dst
}

// DecodeTuple reads a tuple written by AppendTuple. It refuses
// (ErrMalformed) anything AppendTuple cannot have written: unknown tags,
// truncated fields, lengths beyond the input, varints not in their
// shortest form, a non-canonical double, bytes after the last field; and
// more than MaxFields fields (ErrLimit). It never panics, and allocates in
// proportion to len(b), never to a length the input claims. The strings of
// the tuple share one copy of b.
func DecodeTuple(b []byte) (Tuple, error) {
	r := reader{b: b, share: true}
	n, err := r.count()
	if err != nil {
		return nil, err
	}
	t := make(Tuple, n)
	for i := range t {
		start := r.pos
		v, err := r.value()
		if err != nil {
			return nil, fieldError(ErrMalformed, "field", i+1, "", "%s at byte %d", err.msg, start)
		}
		t[i] = v
	}
	if r.pos != len(b) {
		return nil, newError(ErrMalformed, "%d bytes after the last field, at byte %d", len(b)-r.pos, r.pos)
	}
	return t, nil
}

// DecodeField returns field i (0-based, as t[i]) of an encoded tuple
// without decoding the others; a field beyond the tuple's last reads as
// null (only nullable fields may be missing). It checks the encoding up to
// field i only: DecodeTuple is what validates a whole tuple.
func DecodeField(b []byte, i int) (Value, error) {
	if i < 0 {
		return Value{}, newError(ErrMismatch, "field index %d is negative", i)
	}
	r := reader{b: b}
	n, err := r.count()
	if err != nil {
		return Value{}, err
	}
	if i >= n {
		return Null(), nil
	}
	for j := 0; ; j++ {
		start := r.pos
		if j < i {
			err = r.skip()
		} else {
			var v Value
			if v, err = r.value(); err == nil {
				return v, nil
			}
		}
		if err != nil {
			return Value{}, fieldError(ErrMalformed, "field", j+1, "", "%s at byte %d", err.msg, start)
		}
	}
}

// reader reads the tuple codec. Its errors carry only a message; the
// caller places them.
type reader struct {
	b     []byte
	pos   int
	share bool   // strings are substrings of whole, one copy of b
	whole string // string(b), made on the first string read when sharing
}

// count reads a tuple's field count and checks it against MaxFields and
// the input left (every field takes at least one byte).
func (r *reader) count() (int, *Error) {
	n, err := r.uvarint()
	if err != nil {
		return 0, newError(ErrMalformed, "field count: %s", err.msg)
	}
	if n > MaxFields {
		return 0, newError(ErrLimit, "the tuple has %d fields; at most %d are allowed", n, MaxFields)
	}
	if left := len(r.b) - r.pos; n > uint64(left) {
		return 0, newError(ErrMalformed, "the tuple claims %d fields but only %d bytes follow", n, left)
	}
	return int(n), nil
}

func (r *reader) uvarint() (uint64, *Error) {
	var x uint64
	for i, shift := 0, uint(0); i < binary.MaxVarintLen64; i, shift = i+1, shift+7 {
		if r.pos >= len(r.b) {
			return 0, newError(ErrMalformed, "truncated varint")
		}
		c := r.b[r.pos]
		r.pos++
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				return 0, newError(ErrMalformed, "varint overflows 64 bits")
			}
			if i > 0 && c == 0 {
				return 0, newError(ErrMalformed, "varint not in its shortest form")
			}
			return x | uint64(c)<<shift, nil
		}
		x |= uint64(c&0x7f) << shift
	}
	return 0, newError(ErrMalformed, "varint overflows 64 bits")
}

// length reads a uvarint length and checks it against the input left.
func (r *reader) length(what string) (int, *Error) {
	n, err := r.uvarint()
	if err != nil {
		return 0, newError(ErrMalformed, "%s length: %s", what, err.msg)
	}
	if left := len(r.b) - r.pos; n > uint64(left) {
		return 0, newError(ErrMalformed, "%s of %d bytes but only %d follow", what, n, left)
	}
	return int(n), nil
}

func (r *reader) need(n int, what string) *Error {
	if len(r.b)-r.pos < n {
		return newError(ErrMalformed, "truncated %s", what)
	}
	return nil
}

// str returns the next n bytes as a string.
func (r *reader) str(n int) string {
	var s string
	switch {
	case n == 0:
	case r.share:
		if r.whole == "" {
			r.whole = string(r.b)
		}
		s = r.whole[r.pos : r.pos+n]
	default:
		s = string(r.b[r.pos : r.pos+n])
	}
	r.pos += n
	return s
}

func (r *reader) value() (Value, *Error) {
	if err := r.need(1, "field"); err != nil {
		return Value{}, err
	}
	tag := r.b[r.pos]
	r.pos++
	switch tag {
	case tagNull:
		return Null(), nil
	case tagFalse, tagTrue:
		return Bool(tag == tagTrue), nil
	case tagNegInt, tagUint:
		u, err := r.uvarint()
		if err != nil {
			return Value{}, newError(ErrMalformed, "%s: %s", tagName(tag), err.msg)
		}
		if tag == tagNegInt {
			if u > math.MaxInt64 {
				return Value{}, newError(ErrMalformed, "negative integer below the int64 range")
			}
			return Int(int64(^u)), nil
		}
		return Uint(u), nil
	case tagDouble:
		if err := r.need(8, "double"); err != nil {
			return Value{}, err
		}
		bits := binary.LittleEndian.Uint64(r.b[r.pos:])
		r.pos += 8
		v := Double(math.Float64frombits(bits))
		if v.num != bits {
			return Value{}, newError(ErrMalformed, "double %#016x is not canonical (a -0 or a NaN other than 0x7ff8000000000000)", bits)
		}
		return v, nil
	case tagString, tagBytes:
		n, err := r.length(tagName(tag))
		if err != nil {
			return Value{}, err
		}
		kind := KindString
		if tag == tagBytes {
			kind = KindBytes
		}
		return Value{kind: kind, str: r.str(n)}, nil
	case tagUUID:
		if err := r.need(16, "uuid"); err != nil {
			return Value{}, err
		}
		return Value{kind: KindUUID, str: r.str(16)}, nil
	}
	return Value{}, newError(ErrMalformed, "unknown tag 0x%02x", tag)
}

// skip passes over one field, checking what it must to stay in bounds.
func (r *reader) skip() *Error {
	if err := r.need(1, "field"); err != nil {
		return err
	}
	tag := r.b[r.pos]
	switch tag {
	case tagString, tagBytes:
		r.pos++
		n, err := r.length(tagName(tag))
		if err != nil {
			return err
		}
		r.pos += n
		return nil
	}
	_, err := r.value() // small: nothing to allocate
	return err
}
