package tuple

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParseJSONTuple parses a tuple of format f written as a JSON array, as the
// CLI and the HTTP API take it: [1, "name", 9.5, null, "AQI=", true].
//
// Each element is converted to its field's type:
//   - unsigned and integer fields take integers written without a fraction
//     or an exponent, exactly (no float64 rounding), within uint64 or int64;
//   - double fields take any number (5 becomes the double 5) and the
//     strings "NaN", "Infinity" and "-Infinity";
//   - string fields take strings; boolean fields true and false;
//   - bytes fields take base64 strings (standard encoding, with padding);
//   - uuid fields take strings of 8-4-4-4-12 hex digits;
//   - null is taken only by nullable fields.
//
// Elements beyond the format are inferred: integers become integers,
// other numbers doubles, and strings, booleans and null themselves. The
// array may end early if every missing field is nullable (Format.Check).
// Arrays and objects are not values. A refusal names the element and its
// field: `element 3 (price): expected double, got string "x"`.
func ParseJSONTuple(data []byte, f Format) (Tuple, error) {
	return parseJSONTuple(data, f, "tuple", "element")
}

// ParseJSONArgs parses the arguments of a stored procedure, a JSON array
// of values, as ParseJSONTuple parses a tuple beyond any format; its
// refusals name the argument list and the argument:
// `the argument list is not valid JSON: ...`, `argument 2: ...`.
func ParseJSONArgs(data []byte) (Tuple, error) {
	return parseJSONTuple(data, nil, "argument list", "argument")
}

// parseJSONTuple is ParseJSONTuple; what names the array in refusals, elem
// each element.
func parseJSONTuple(data []byte, f Format, what, elem string) (Tuple, error) {
	var t Tuple
	err := parseJSONArray(data, what, elem+"s", MaxFields, func(i int, raw []byte) error {
		var fd *Field
		if i < len(f) {
			fd = &f[i]
		}
		v, msg := fromJSON(raw, fd)
		if msg != "" {
			return fieldError(ErrMismatch, elem, i+1, nameOf(fd), "%s", msg)
		}
		t = append(t, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := f.Check(t); err != nil {
		return nil, err
	}
	return t, nil
}

// ParseJSONKey parses a key written as a JSON array, one element per key
// part, each converted by its part's declaration in parts as
// ParseJSONTuple converts a field. The array must have exactly len(parts)
// elements, a key holds no NaN, and its encoding takes at most
// MaxKeyBytes (ErrLimit, as EncodeKey).
func ParseJSONKey(data []byte, parts Format) ([]Value, error) {
	if len(parts) > MaxKeyParts {
		return nil, newError(ErrLimit, "the key format has %d parts; at most %d are allowed", len(parts), MaxKeyParts)
	}
	for i := range parts {
		if !parts[i].Type.Valid() {
			return nil, fieldError(ErrFormat, "key part", i+1, parts[i].Name, "invalid type %v", parts[i].Type)
		}
	}
	key := make([]Value, 0, len(parts))
	err := parseJSONArray(data, "key", "elements", len(parts), func(i int, raw []byte) error {
		v, msg := fromJSON(raw, &parts[i])
		if msg == "" && v.kind == KindDouble && v.num == canonicalNaN {
			return fieldError(ErrNaN, "key part", i+1, parts[i].Name, "NaN cannot be part of a key")
		}
		if msg != "" {
			return fieldError(ErrMismatch, "key part", i+1, parts[i].Name, "%s", msg)
		}
		key = append(key, v)
		return nil
	})
	if errors.Is(err, ErrLimit) || err == nil && len(key) != len(parts) {
		needs := "none"
		if len(parts) > 0 {
			needs = strconv.Itoa(len(parts)) + " (" + joinNames(parts) + ")"
		}
		return nil, newError(ErrMismatch, "the key has %s; it needs %s",
			plural(countJSONElements(data), "element"), needs)
	}
	if err != nil {
		return nil, err
	}
	if _, err := EncodeKey(key...); err != nil {
		return nil, err
	}
	return key, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// joinNames lists a format's field names for a message.
func joinNames(f Format) string {
	names := make([]string, len(f))
	for i, fd := range f {
		names[i] = fd.Name
	}
	return strings.Join(names, ", ")
}

// countJSONElements counts the elements of a valid JSON array, for a
// message.
func countJSONElements(data []byte) int {
	var elems []json.RawMessage
	_ = json.Unmarshal(data, &elems)
	return len(elems)
}

func nameOf(fd *Field) string {
	if fd == nil {
		return ""
	}
	return fd.Name
}

// parseJSONArray checks that data is one JSON array and calls fn with each
// element (0-based) in order; more than limit elements is ErrLimit. what
// names the array in messages, elems its elements.
func parseJSONArray(data []byte, what, elems string, limit int, fn func(i int, raw []byte) error) error {
	if !json.Valid(data) {
		var v any
		err := json.Unmarshal(data, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return newError(ErrSyntax, "the %s is not valid JSON: %v (at byte %d)", what, err, se.Offset)
		}
		return newError(ErrSyntax, "the %s is not valid JSON", what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('[') {
		return newError(ErrSyntax, "the %s must be a JSON array, got %s", what, describeJSON(bytes.TrimSpace(data)))
	}
	for i := 0; dec.More(); i++ {
		if i >= limit {
			return newError(ErrLimit, "the %s has more than %d %s", what, limit, elems)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return newError(ErrSyntax, "element %d of the %s: %v", i+1, what, err)
		}
		if err := fn(i, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing ']'
		return newError(ErrSyntax, "the %s: %v", what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return newError(ErrSyntax, "the %s has data after its closing ']'", what)
	}
	return nil
}

// msgRange says a number does not fit its type.
const msgRange = "out of the range of "

// fromJSON converts one JSON value for a field (nil: beyond the format,
// inferred). It returns the value, or why not.
func fromJSON(raw []byte, fd *Field) (Value, string) {
	if len(raw) == 0 {
		return Value{}, "empty value"
	}
	expected := func() string {
		return "expected " + fd.Type.String() + ", got " + describeJSON(raw)
	}
	switch raw[0] {
	case 'n':
		if fd == nil || fd.Nullable {
			return Null(), ""
		}
		return Value{}, expected() + " (the field is not nullable)"
	case 't', 'f':
		if fd == nil || fd.Type == TypeBoolean {
			return Bool(raw[0] == 't'), ""
		}
		return Value{}, expected()
	case '"':
		s, msg := jsonString(raw)
		if msg != "" {
			return Value{}, msg
		}
		if fd == nil {
			return String(s), ""
		}
		return stringFromJSON(s, fd, expected)
	case '[', '{':
		if fd == nil {
			return Value{}, "got " + describeJSON(raw) + "; a field holds a value, not an array or object"
		}
		return Value{}, expected()
	}
	return numberFromJSON(string(raw), fd, expected)
}

// jsonString reads a JSON string (raw, with its quotes), or says why not.
// encoding/json writes U+FFFD for bytes that are not UTF-8 and for an
// escaped surrogate (\ud800 to \udfff) that is not half of a pair, so two
// different inputs would read as the same string; both are refused here.
func jsonString(raw []byte) (string, string) {
	if !utf8.Valid(raw) {
		return "", badUTF8(string(raw[1:]))
	}
	if msg := checkSurrogates(raw); msg != "" {
		return "", msg
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", "bad string: " + err.Error()
	}
	return s, ""
}

// checkSurrogates says where a JSON string (raw, with its quotes) has an
// escaped surrogate that is not half of a pair, or "".
func checkSurrogates(raw []byte) string {
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // an escape of one character
			continue
		}
		r, ok := hex4(raw[i+2:])
		if !ok {
			return "" // json.Unmarshal names it
		}
		switch {
		case 0xd800 <= r && r < 0xdc00:
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, ok := hex4(raw[i+8:]); ok && 0xdc00 <= lo && lo < 0xe000 {
					i += 11
					continue
				}
			}
			fallthrough
		case 0xdc00 <= r && r < 0xe000:
			return "the string has \\u" + strings.ToLower(string(raw[i+2:i+6])) + " at offset " + strconv.Itoa(i-1) +
				", a surrogate that is not half of a pair, which is not valid UTF-8 (a string holds text; store bytes in a bytes field)"
		}
		i += 5
	}
	return ""
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		d, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

func stringFromJSON(s string, fd *Field, expected func() string) (Value, string) {
	switch fd.Type {
	case TypeString:
		return String(s), ""
	case TypeBytes:
		b, err := base64.StdEncoding.Strict().DecodeString(s)
		if err != nil {
			return Value{}, "expected bytes as a base64 string, got " + quoteShort(s) + ": " + err.Error()
		}
		return Bytes(b), ""
	case TypeUUID:
		u, ok := parseUUID(s)
		if !ok {
			return Value{}, "expected a uuid written as 8-4-4-4-12 hex digits, got " + quoteShort(s)
		}
		return UUID(u), ""
	case TypeDouble:
		switch s {
		case "NaN":
			return Double(math.NaN()), ""
		case "Infinity":
			return Double(math.Inf(1)), ""
		case "-Infinity":
			return Double(math.Inf(-1)), ""
		}
	}
	return Value{}, expected()
}

func numberFromJSON(num string, fd *Field, expected func() string) (Value, string) {
	integral := !strings.ContainsAny(num, ".eE")
	if fd == nil {
		if !integral {
			return parseDouble(num)
		}
		return parseInteger(num, "integer")
	}
	switch fd.Type {
	case TypeDouble:
		return parseDouble(num)
	case TypeUnsigned, TypeInteger:
		if !integral {
			return Value{}, expected() + " (an integer is written without a fraction or exponent)"
		}
		v, msg := parseInteger(num, fd.Type.String())
		if msg == "" && fd.Type == TypeUnsigned && v.kind == KindInt {
			return Value{}, expected()
		}
		return v, msg
	}
	return Value{}, expected()
}

func parseDouble(num string) (Value, string) {
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return Value{}, "number " + shorten(num) + " is " + msgRange + "double"
	}
	return Double(f), ""
}

func parseInteger(num, typ string) (Value, string) {
	if num[0] == '-' {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return Value{}, "number " + shorten(num) + " is " + msgRange + typ
		}
		return Int(n), ""
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return Value{}, "number " + shorten(num) + " is " + msgRange + typ
	}
	return Uint(n), ""
}

func shorten(s string) string {
	if len(s) > maxShown {
		return s[:maxShown] + "..."
	}
	return s
}

// describeJSON names a JSON value for a message: `string "x"`, `number
// 1.5`, `boolean true`, `null`, `an array`, `an object`.
func describeJSON(raw []byte) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean " + string(raw)
	case '"':
		return "string " + shorten(string(raw))
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return "number " + shorten(string(raw))
}

// AppendJSON appends t as a JSON array that ParseJSONTuple reads back as t
// (with the same format, or beyond any format): integers exactly, doubles
// in the shortest form that reads back as the same double and always with
// a '.' or an exponent (1.0, 1e+21), so that they stay doubles even where
// no format says so; NaN and the infinities as the strings "NaN",
// "Infinity", "-Infinity" (double fields read them back); bytes as base64
// strings (standard encoding); UUIDs as their 8-4-4-4-12 strings. A string
// that is not valid UTF-8 has its bad bytes written as U+FFFD.
func AppendJSON(dst []byte, t Tuple) []byte {
	dst = append(dst, '[')
	for i, v := range t {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONValue(dst, v)
	}
	return append(dst, ']')
}

// MarshalJSON writes t as AppendJSON does.
func (t Tuple) MarshalJSON() ([]byte, error) { return AppendJSON(nil, t), nil }

func appendJSONValue(dst []byte, v Value) []byte {
	switch v.kind {
	case KindNull:
		return append(dst, "null"...)
	case KindBool:
		return strconv.AppendBool(dst, v.num != 0)
	case KindInt:
		return strconv.AppendInt(dst, int64(v.num), 10)
	case KindUint:
		return strconv.AppendUint(dst, v.num, 10)
	case KindDouble:
		return appendJSONDouble(dst, math.Float64frombits(v.num))
	case KindString:
		return appendJSONString(dst, v.str)
	case KindBytes:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, []byte(v.str))
		return append(dst, '"')
	case KindUUID:
		dst = append(dst, '"')
		dst = appendUUID(dst, v.str)
		return append(dst, '"')
	}
	return append(dst, "null"...)
}

// appendJSONDouble writes f as encoding/json does (decimal notation
// between 1e-6 and 1e21, exponent notation outside) but always with a
// '.' or an exponent.
func appendJSONDouble(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return strconv.AppendFloat(dst, f, 'e', -1, 64)
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'f', -1, 64)
	if bytes.IndexByte(dst[start:], '.') < 0 {
		dst = append(dst, ".0"...)
	}
	return dst
}

func appendJSONString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
