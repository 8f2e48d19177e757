package tuple

import (
	"fmt"
	"strconv"
)

// Classes of refusal. Every error this package returns is an *Error that
// wraps exactly one of them, so errors.Is(err, ErrMismatch) and the like
// classify it; all of them are the caller's input being wrong (gRPC
// InvalidArgument), except ErrMalformed on bytes read from one's own
// storage, which means corruption.
var (
	// ErrMalformed: bytes that are not a valid key, tuple or ops encoding.
	ErrMalformed = classError("malformed encoding")
	// ErrSyntax: text that does not parse: JSON, a type name, a field
	// spec, a UUID.
	ErrSyntax = classError("syntax error")
	// ErrFormat: a Format (or key format) that is not valid.
	ErrFormat = classError("invalid format")
	// ErrMismatch: a value that does not fit its field's type, a missing
	// field, a key with the wrong number of parts.
	ErrMismatch = classError("value does not match the format")
	// ErrLimit: more fields, key parts or ops than the limits allow.
	ErrLimit = classError("limit exceeded")
	// ErrOp: an update op that cannot be applied: unknown operator or
	// field, a field out of range, an operand of the wrong kind, an
	// integer overflow.
	ErrOp = classError("update op failed")
	// ErrNaN: a NaN in a key; keys must be totally ordered.
	ErrNaN = classError("NaN in a key")
)

type classError string

func (c classError) Error() string { return "tuple: " + string(c) }

// Error is a refusal of this package. Its message says what was wrong and
// where: the op (1-based), the field, key part or JSON element (1-based)
// with its name when the format gives one, the expected type and what was
// given. Callers map it to gRPC InvalidArgument (or, for ErrMalformed on
// their own stored bytes, to an internal error).
type Error struct {
	// Class is the kind of refusal: one of the Err* variables.
	Class error
	// Op is the 1-based number of the update op the refusal is about, or 0.
	Op int
	// Field is the 1-based number of the field, key part or JSON element
	// the refusal is about, or 0 when it is about no one field.
	Field int
	// Name is the name of that field in the format, or "".
	Name string

	msg string
}

func (e *Error) Error() string { return e.msg }

// Unwrap returns the class, for errors.Is.
func (e *Error) Unwrap() error { return e.Class }

func newError(class error, format string, args ...any) *Error {
	return &Error{Class: class, msg: fmt.Sprintf(format, args...)}
}

// fieldError is a refusal about field (or key part, or element) n, named
// name in the format ("" beyond it); what names the thing: "field",
// "key part", "element".
func fieldError(class error, what string, n int, name, format string, args ...any) *Error {
	return &Error{Class: class, Field: n, Name: name,
		msg: fieldLabel(what, n, name) + ": " + fmt.Sprintf(format, args...)}
}

func fieldLabel(what string, n int, name string) string {
	if name == "" {
		return what + " " + strconv.Itoa(n)
	}
	return what + " " + strconv.Itoa(n) + " (" + name + ")"
}

// maxShown is how much of a value an error message shows.
const maxShown = 64

// describe names a value for an error message: its kind and (shortened)
// value, as in `string "x"`, `unsigned 5`, `null`.
func describe(v Value) string {
	if v.kind == KindNull {
		return "null"
	}
	s := v.String()
	if len(s) > maxShown {
		s = s[:maxShown] + "..."
		if v.kind == KindString {
			s += `"`
		}
	}
	return v.kind.String() + " " + s
}

// quoteShort quotes a piece of the caller's input for a message, shortened.
func quoteShort(s string) string {
	if len(s) > maxShown {
		return strconv.Quote(s[:maxShown]) + "..."
	}
	return strconv.Quote(s)
}
