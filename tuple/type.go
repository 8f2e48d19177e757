package tuple

import "strconv"

// Type is the declared type of a formatted field. The zero Type is not a
// valid type. The numbers are stable (they may be stored); the names are
// what ParseType accepts.
type Type uint8

// Field types.
const (
	TypeUnsigned Type = iota + 1 // a non-negative integer (KindUint)
	TypeInteger                  // any integer (KindInt or KindUint)
	TypeDouble                   // a float64 (KindDouble)
	TypeString                   // a string (KindString)
	TypeBoolean                  // true or false (KindBool)
	TypeBytes                    // a byte string (KindBytes)
	TypeUUID                     // a 16-byte UUID (KindUUID)
)

var typeNames = [...]string{
	TypeUnsigned: "unsigned",
	TypeInteger:  "integer",
	TypeDouble:   "double",
	TypeString:   "string",
	TypeBoolean:  "boolean",
	TypeBytes:    "bytes",
	TypeUUID:     "uuid",
}

// ParseType returns the type named s: "unsigned", "integer", "double",
// "string", "boolean", "bytes" or "uuid".
func ParseType(s string) (Type, error) {
	for t, name := range typeNames {
		if name != "" && name == s {
			return Type(t), nil
		}
	}
	return 0, newError(ErrSyntax, "unknown type %s; the types are unsigned, integer, double, string, boolean, bytes, uuid", quoteShort(s))
}

// Valid reports whether t is one of the Type constants.
func (t Type) Valid() bool { return t >= TypeUnsigned && t <= TypeUUID }

func (t Type) String() string {
	if t.Valid() {
		return typeNames[t]
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}
