package tuple

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
)

// Kind is what a Value holds.
type Kind uint8

// Kinds of values. The zero Value is KindNull.
const (
	KindNull   Kind = iota // no value
	KindBool               // true or false
	KindInt                // a negative integer
	KindUint               // a non-negative integer
	KindDouble             // a float64
	KindString             // a string
	KindBytes              // a byte string
	KindUUID               // a 16-byte UUID
)

var kindNames = [...]string{
	KindNull:   "null",
	KindBool:   "boolean",
	KindInt:    "integer",
	KindUint:   "unsigned",
	KindDouble: "double",
	KindString: "string",
	KindBytes:  "bytes",
	KindUUID:   "uuid",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// canonicalNaN is the one NaN a Value holds: Double turns every NaN into
// it, so that values compare equal exactly when they are the same.
const canonicalNaN = 0x7ff8000000000000

// Value is one typed value of a tuple. It is small and immutable (bytes
// and UUIDs are held in a string) and canonical: an integer is KindInt
// only when negative, doubles have one zero and one NaN, so two values
// are Equal exactly when they are ==.
type Value struct {
	kind Kind
	num  uint64 // bool 0/1, an int64 or uint64, a double's bits
	str  string // string, bytes or the 16 bytes of a UUID
}

// Null returns the null value (the zero Value).
func Null() Value { return Value{} }

// Bool returns a boolean value.
func Bool(b bool) Value {
	if b {
		return Value{kind: KindBool, num: 1}
	}
	return Value{kind: KindBool}
}

// Int returns an integer value. A non-negative n is KindUint: an integer
// and an unsigned value of the same number are the same value.
func Int(n int64) Value {
	if n >= 0 {
		return Value{kind: KindUint, num: uint64(n)}
	}
	return Value{kind: KindInt, num: uint64(n)}
}

// Uint returns a non-negative integer value.
func Uint(n uint64) Value { return Value{kind: KindUint, num: n} }

// Double returns a double value. -0 becomes +0, and every NaN the one
// canonical NaN (0x7ff8000000000000). A NaN is a valid value but cannot be
// part of a key.
func Double(f float64) Value {
	switch {
	case f == 0:
		return Value{kind: KindDouble}
	case f != f:
		return Value{kind: KindDouble, num: canonicalNaN}
	}
	return Value{kind: KindDouble, num: math.Float64bits(f)}
}

// String returns a string value.
func String(s string) Value { return Value{kind: KindString, str: s} }

// Bytes returns a byte-string value holding a copy of b.
func Bytes(b []byte) Value { return Value{kind: KindBytes, str: string(b)} }

// UUID returns a UUID value.
func UUID(u [16]byte) Value { return Value{kind: KindUUID, str: string(u[:])} }

// ParseUUID parses a UUID written canonically, 8-4-4-4-12 hex digits
// (either case), as in "123e4567-e89b-12d3-a456-426614174000".
func ParseUUID(s string) (Value, error) {
	u, ok := parseUUID(s)
	if !ok {
		return Value{}, newError(ErrSyntax, "%s is not a UUID; write it as 8-4-4-4-12 hex digits", quoteShort(s))
	}
	return UUID(u), nil
}

func parseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	j := 0
	for i := 0; i < len(s); {
		if s[i] == '-' {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Kind returns what v holds.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether v is null.
func (v Value) IsNull() bool { return v.kind == KindNull }

// AsBool returns a boolean's value; ok is false for other kinds.
func (v Value) AsBool() (b, ok bool) { return v.num != 0, v.kind == KindBool }

// AsInt returns an integer's value; ok is false for other kinds and for
// unsigned values above math.MaxInt64.
func (v Value) AsInt() (int64, bool) {
	switch v.kind {
	case KindInt:
		return int64(v.num), true
	case KindUint:
		return int64(v.num), v.num <= math.MaxInt64
	}
	return 0, false
}

// AsUint returns a non-negative integer's value; ok is false for other
// kinds (negative integers included).
func (v Value) AsUint() (uint64, bool) {
	if v.kind != KindUint {
		return 0, false
	}
	return v.num, true
}

// AsDouble returns a double's value; ok is false for other kinds
// (integers included).
func (v Value) AsDouble() (float64, bool) {
	if v.kind != KindDouble {
		return 0, false
	}
	return math.Float64frombits(v.num), true
}

// AsString returns a string's value; ok is false for other kinds.
func (v Value) AsString() (string, bool) {
	if v.kind != KindString {
		return "", false
	}
	return v.str, true
}

// AsBytes returns a copy of a byte string's value; ok is false for other
// kinds.
func (v Value) AsBytes() ([]byte, bool) {
	if v.kind != KindBytes {
		return nil, false
	}
	return []byte(v.str), true
}

// AsUUID returns a UUID's value; ok is false for other kinds.
func (v Value) AsUUID() ([16]byte, bool) {
	var u [16]byte
	if v.kind != KindUUID {
		return u, false
	}
	copy(u[:], v.str)
	return u, true
}

// String writes v for a message: null, true, -5, 5, 1.5 (NaN, +Inf, -Inf),
// a Go-quoted string, bytes as x'0a0b', a UUID in its canonical form.
func (v Value) String() string {
	switch v.kind {
	case KindNull:
		return "null"
	case KindBool:
		return strconv.FormatBool(v.num != 0)
	case KindInt:
		return strconv.FormatInt(int64(v.num), 10)
	case KindUint:
		return strconv.FormatUint(v.num, 10)
	case KindDouble:
		return strconv.FormatFloat(math.Float64frombits(v.num), 'g', -1, 64)
	case KindString:
		return strconv.Quote(v.str)
	case KindBytes:
		return "x'" + hex.EncodeToString([]byte(v.str)) + "'"
	case KindUUID:
		return string(appendUUID(nil, v.str))
	}
	return v.kind.String()
}

func appendUUID(dst []byte, u string) []byte {
	const digits = "0123456789abcdef"
	for i := range len(u) {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, digits[u[i]>>4], digits[u[i]&0xf])
	}
	return dst
}

// Equal reports whether v and w are the same value. Values are canonical,
// so this is v == w, and Compare(v, w) == 0.
func (v Value) Equal(w Value) bool { return v == w }

// rank orders the classes of values: null < false < true < negative
// integers < non-negative integers < doubles < strings < bytes < UUIDs.
// It is also the value's tag in the key encoding.
func (v Value) rank() byte {
	switch v.kind {
	case KindNull:
		return tagNull
	case KindBool:
		if v.num != 0 {
			return tagTrue
		}
		return tagFalse
	case KindInt:
		return tagNegInt
	case KindUint:
		return tagUint
	case KindDouble:
		return tagDouble
	case KindString:
		return tagString
	case KindBytes:
		return tagBytes
	}
	return tagUUID
}

// Compare orders values totally: null < false < true < negative integers
// < non-negative integers < doubles < strings < bytes < UUIDs. Integers
// compare by value, doubles by value with NaN after every other double,
// strings, bytes and UUIDs bytewise. It returns -1, 0 or +1. The key
// encoding preserves this order.
func Compare(a, b Value) int {
	ra, rb := a.rank(), b.rank()
	if ra != rb {
		return cmp3(ra < rb)
	}
	switch a.kind {
	case KindInt:
		return cmpOrdered(int64(a.num), int64(b.num))
	case KindUint:
		return cmpOrdered(a.num, b.num)
	case KindDouble:
		x, y := math.Float64frombits(a.num), math.Float64frombits(b.num)
		xn, yn := x != x, y != y
		switch {
		case xn || yn:
			if xn == yn {
				return 0
			}
			return cmp3(yn)
		}
		return cmpOrdered(x, y)
	case KindString, KindBytes, KindUUID:
		return strings.Compare(a.str, b.str)
	}
	return 0 // null, false, true: the rank says it all
}

func cmp3(less bool) int {
	if less {
		return -1
	}
	return 1
}

func cmpOrdered[T int64 | uint64 | float64](x, y T) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// Tuple is an array of values: a row of a space.
type Tuple []Value

// Equal reports whether t and u hold equal values.
func (t Tuple) Equal(u Tuple) bool {
	if len(t) != len(u) {
		return false
	}
	for i := range t {
		if t[i] != u[i] {
			return false
		}
	}
	return true
}

// CompareKeys orders keys lexicographically by Compare, a key that is a
// prefix of another first. It returns -1, 0 or +1. AppendKey preserves
// this order.
func CompareKeys(a, b []Value) int {
	for i := range min(len(a), len(b)) {
		if c := Compare(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmpOrdered(int64(len(a)), int64(len(b)))
}
