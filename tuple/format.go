package tuple

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest field name, in bytes.
const MaxNameLen = 64

// Field is the declaration of one field of a space's tuples.
type Field struct {
	// Name is 1 to MaxNameLen ASCII letters, digits and '_', starting with
	// a letter or '_'.
	Name string
	// Type is the type of the field's values.
	Type Type
	// Nullable lets the field hold null, or be missing at the end of a
	// tuple.
	Nullable bool
}

// ParseField parses "name:type" or, for a nullable field, "name:type?",
// as in "price:double" or "comment:string?".
func ParseField(spec string) (Field, error) {
	name, typ, ok := strings.Cut(spec, ":")
	if !ok {
		return Field{}, newError(ErrSyntax, "field spec %s has no ':'; write name:type or name:type?", quoteShort(spec))
	}
	if err := checkName(name); err != "" {
		return Field{}, newError(ErrSyntax, "field spec %s: %s", quoteShort(spec), err)
	}
	f := Field{Name: name}
	if t, ok := strings.CutSuffix(typ, "?"); ok {
		f.Nullable, typ = true, t
	}
	t, err := ParseType(typ)
	if err != nil {
		return Field{}, newError(ErrSyntax, "field spec %s: %s", quoteShort(spec), err.Error())
	}
	f.Type = t
	return f, nil
}

// String writes the field as ParseField reads it: "name:type" or
// "name:type?".
func (f Field) String() string {
	s := f.Name + ":" + f.Type.String()
	if f.Nullable {
		s += "?"
	}
	return s
}

// checkName says what is wrong with a field name, or "".
func checkName(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case len(name) > MaxNameLen:
		return "the name is longer than 64 bytes"
	case '0' <= name[0] && name[0] <= '9':
		return "the name " + quoteShort(name) + " starts with a digit"
	}
	for i := range len(name) {
		c := name[i]
		if !isNameByte(c) {
			return "the name " + quoteShort(name) + " has " + quoteShort(name[i:i+1]) + "; names have ASCII letters, digits and '_'"
		}
	}
	return ""
}

func isNameByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// Format declares the fields of a space's tuples, in order. A tuple may
// have more fields than its format; they hold values of any kind.
type Format []Field

// Validate reports what is wrong with a format: no fields, more than
// MaxFields, an invalid name or type, a name used twice.
func (f Format) Validate() error {
	if len(f) == 0 {
		return newError(ErrFormat, "the format has no fields; declare at least one")
	}
	if len(f) > MaxFields {
		return newError(ErrLimit, "the format has %d fields; at most %d are allowed", len(f), MaxFields)
	}
	for i, fd := range f {
		if msg := checkName(fd.Name); msg != "" {
			return fieldError(ErrFormat, "field", i+1, "", "%s", msg)
		}
		if !fd.Type.Valid() {
			return fieldError(ErrFormat, "field", i+1, fd.Name, "invalid type %v", fd.Type)
		}
		if j, _ := f[:i].Index(fd.Name); j >= 0 {
			return fieldError(ErrFormat, "field", i+1, fd.Name, "the name is already field %d's", j+1)
		}
	}
	return nil
}

// Index returns the 0-based position of the field named name (as in f
// and in a tuple), or -1 and false.
func (f Format) Index(name string) (int, bool) {
	for i := range f {
		if f[i].Name == name {
			return i, true
		}
	}
	return -1, false
}

// Check reports whether t fits the format: each formatted field present
// and of its type, as in
//
//	field 3 (price): expected double, got string "x"
//
// Unsigned fields take non-negative integers only, integer fields any
// integer, double fields doubles only (not integers: write 1.0, or let
// ParseJSONTuple convert), the others their own kind; a nullable field
// also takes null. A tuple may end before the format does if every missing
// field is nullable (they read as null, as in Tarantool); fields beyond
// the format hold anything but a string that is not valid UTF-8. A string,
// in the format or beyond it, is text: one that is not valid UTF-8 is
// refused (bytes fields hold bytes), so that no two inputs are stored as
// the same string and every string reads back in JSON as it was written.
// A tuple of more than MaxFields fields is refused (ErrLimit). The
// refusal is an *Error of class ErrMismatch with the field's number and
// name.
func (f Format) Check(t Tuple) error {
	if len(t) > MaxFields {
		return newError(ErrLimit, "the tuple has %d fields; at most %d are allowed", len(t), MaxFields)
	}
	for i, fd := range f {
		if i >= len(t) {
			if !fd.Nullable {
				return fieldError(ErrMismatch, "field", i+1, fd.Name, "missing: the tuple has %d fields and this one is not nullable", len(t))
			}
			continue
		}
		if err := checkValue(fd, t[i]); err != "" {
			return fieldError(ErrMismatch, "field", i+1, fd.Name, "%s", err)
		}
	}
	for i := len(f); i < len(t); i++ {
		if msg := checkUTF8(t[i]); msg != "" {
			return fieldError(ErrMismatch, "field", i+1, "", "%s", msg)
		}
	}
	return nil
}

// CheckField checks that v fits field i (0-based) of the format, as Check
// checks that field of a tuple: of its type, or null when it is nullable.
// The refusal (ErrMismatch) names the field.
func (f Format) CheckField(i int, v Value) error {
	if i < 0 || i >= len(f) {
		return newError(ErrMismatch, "field %d is not in the format of %d fields", i+1, len(f))
	}
	if msg := checkValue(f[i], v); msg != "" {
		return fieldError(ErrMismatch, "field", i+1, f[i].Name, "%s", msg)
	}
	return nil
}

// checkUTF8 says why a string value is not valid UTF-8, or "" (also for
// any other kind).
func checkUTF8(v Value) string {
	if v.kind != KindString || utf8.ValidString(v.str) {
		return ""
	}
	return badUTF8(v.str)
}

// badUTF8 says where s, which is not valid UTF-8, first goes wrong.
func badUTF8(s string) string {
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	return "the string is not valid UTF-8: byte 0x" + strconv.FormatUint(uint64(s[min(i, len(s)-1)]), 16) +
		" at offset " + strconv.Itoa(i) + " (a string holds text; store bytes in a bytes field)"
}

// checkValue says why v does not fit a field, or "".
func checkValue(fd Field, v Value) string {
	if v.kind == KindNull && fd.Nullable {
		return ""
	}
	if v.kind == KindNull || !fd.Type.accepts(v.kind) {
		return "expected " + fd.Type.String() + ", got " + describe(v)
	}
	return checkUTF8(v)
}

// accepts reports whether a value of kind k fits a field of type t (null
// aside).
func (t Type) accepts(k Kind) bool {
	switch t {
	case TypeUnsigned:
		return k == KindUint
	case TypeInteger:
		return k == KindInt || k == KindUint
	case TypeDouble:
		return k == KindDouble
	case TypeString:
		return k == KindString
	case TypeBoolean:
		return k == KindBool
	case TypeBytes:
		return k == KindBytes
	case TypeUUID:
		return k == KindUUID
	}
	return false
}
