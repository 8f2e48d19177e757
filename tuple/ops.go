package tuple

import (
	"errors"
	"math"
	"math/bits"
	"slices"
	"strconv"
)

// MaxOps is the most update ops one update may carry.
const MaxOps = 1000

// Update operators, Tarantool's.
const (
	OpAssign = '=' // set the field to Arg; on field len+1, append Arg
	OpAdd    = '+' // add the number Arg to the field
	OpSub    = '-' // subtract the number Arg from the field
	OpAnd    = '&' // bitwise and of unsigned integers
	OpOr     = '|' // bitwise or of unsigned integers
	OpXor    = '^' // bitwise exclusive or of unsigned integers
	OpInsert = '!' // insert Arg before the field; on field len+1, append
	OpDelete = '#' // delete Count fields from the field on
	OpSplice = ':' // replace Count bytes of a string at Offset with Arg
	OpMax    = '>' // set the field to Arg if Arg is greater (JSON: "max")
	OpMin    = '<' // set the field to Arg if Arg is less (JSON: "min")
)

// opName is how an operator is written in JSON and in refusals: "max" and
// "min" for OpMax and OpMin, the code itself for the others.
func opName(code byte) string {
	switch code {
	case OpMax:
		return "max"
	case OpMin:
		return "min"
	}
	return string([]byte{code})
}

// opCode is the operator written name in JSON, and whether it is one.
func opCode(name string) (byte, bool) {
	switch name {
	case "max":
		return OpMax, true
	case "min":
		return OpMin, true
	}
	if len(name) == 1 && validCode(name[0]) && name[0] != OpMax && name[0] != OpMin {
		return name[0], true
	}
	return 0, false
}

// FieldRef names the field an op acts on: by Name, resolved through the
// format, or by Number, 1-based, where a negative number counts from the
// end (-1 is the last field; for '!', -1 appends, as in Tarantool). Exactly
// one of them is set.
type FieldRef struct {
	Name   string
	Number int
}

func (r FieldRef) String() string {
	if r.Name != "" {
		return strconv.Quote(r.Name)
	}
	return strconv.Itoa(r.Number)
}

// Op is one update operation of an update, as in Tarantool:
//
//	'='  Arg                      assign; field len+1 appends
//	'+'  Arg                      add a number: integers exactly (an
//	'-'  Arg                      overflow is refused), a double on
//	                              either side makes a double
//	'&' '|' '^'  Arg              bitwise, on unsigned integers
//	'!'  Arg                      insert before the field; len+1 appends
//	'#'  Count                    delete Count (>= 1) fields from the
//	                              field on (fewer if the tuple ends first)
//	':'  Offset, Count, Arg       splice a string: cut Count bytes at
//	                              byte Offset (1-based; negative from
//	                              the end, -1 after the last byte) and
//	                              put the string Arg there
//	'>' (max)  Arg                the greater of the field and Arg, by
//	'<' (min)  Arg                Compare (the lesser for min): Arg is
//	                              null, of the field's kind, or both
//	                              are integers; a null field takes Arg
//
// Fields an operator does not use must be zero. Splice follows Tarantool:
// an Offset past the end means the end, a Count past the end cuts to the
// end, a negative Count keeps that many bytes at the end.
//
// Convert (for '=' and '!' only) says that Arg was written in JSON for a
// field whose type was not known then: ParseJSONOps sets it for a negative
// field number, which names a field only once the tuple's length is known.
// ApplyOps then converts Arg by the declaration of the field it lands on,
// as ParseJSONTuple converts an element: an integer to a double for a
// double field, "NaN", "Infinity" and "-Infinity" to doubles there, a
// base64 string to bytes for a bytes field, an 8-4-4-4-12 string to a
// UUID for a uuid field. Beyond the format Arg stays as it is.
type Op struct {
	Code    byte
	Field   FieldRef
	Arg     Value
	Count   int
	Offset  int
	Convert bool
}

func validCode(c byte) bool {
	switch c {
	case OpAssign, OpAdd, OpSub, OpAnd, OpOr, OpXor, OpInsert, OpDelete, OpSplice, OpMax, OpMin:
		return true
	}
	return false
}

// opError is a refusal of op k (1-based) on field n (resolved, 1-based,
// or 0 if it could not be), named name.
func opError(class error, k int, op Op, n int, name, format string, args ...any) *Error {
	field := "field " + op.Field.String()
	if n > 0 {
		field = fieldLabel("field", n, name)
	}
	e := newError(class, "op %d (%s on %s): "+format, append([]any{k, strconv.Quote(opName(op.Code)), field}, args...)...)
	e.Op, e.Field, e.Name = k, n, name
	return e
}

// ApplyOps applies ops in order to a copy of t (t is never changed),
// resolving field names through f, and checks the result with f.Check. A
// refusal names the op and the field:
//
//	op 2 ("+" on field 4 (price)): cannot add string to double
//
// A field number out of the tuple, an unknown name or operator, an
// operand of the wrong kind and an integer overflow are ErrOp; a result
// that does not fit the format (a negative number in an unsigned field) is
// the ErrMismatch of Check.
func ApplyOps(t Tuple, ops []Op, f Format) (Tuple, error) {
	if len(ops) > MaxOps {
		return nil, newError(ErrLimit, "the update has %d ops; at most %d are allowed", len(ops), MaxOps)
	}
	out := slices.Clone(t)
	for k, op := range ops {
		var err *Error
		if out, err = applyOp(out, k+1, op, f); err != nil {
			return nil, err
		}
	}
	if err := f.Check(out); err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, &Error{Class: e.Class, Field: e.Field, Name: e.Name, msg: "the updated tuple does not fit the format: " + e.msg}
		}
		return nil, err
	}
	return out, nil
}

// resolve returns the 1-based number of the field an op acts on, or 0
// and a refusal. size is the tuple's field count; appending (len+1) is
// allowed for '=' and '!'.
func resolve(k int, op Op, f Format, size int) (int, *Error) {
	ref := op.Field
	n := ref.Number
	switch {
	case ref.Name != "" && ref.Number != 0:
		return 0, opError(ErrOp, k, op, 0, "", "the field is given both by name and by number %d; give one", ref.Number)
	case ref.Name != "":
		i, ok := f.Index(ref.Name)
		if !ok {
			return 0, opError(ErrOp, k, op, 0, "", "no field is named %s in the format", quoteShort(ref.Name))
		}
		n = i + 1
	case n == 0:
		return 0, opError(ErrOp, k, op, 0, "", "no field given (field numbers start at 1; -1 is the last field)")
	case n < 0:
		end := size + 1 // -1 is the last field
		if op.Code == OpInsert {
			end = size + 2 // -1 appends
		}
		if n < -end+1 {
			return 0, opError(ErrOp, k, op, 0, "", "the tuple has only %d fields", size)
		}
		n += end
	}
	limit := size
	if op.Code == OpAssign || op.Code == OpInsert {
		limit = size + 1
	}
	if n > limit {
		name := ""
		if n <= len(f) {
			name = f[n-1].Name
		}
		return 0, opError(ErrOp, k, op, n, name, "the tuple has only %d fields", size)
	}
	return n, nil
}

func applyOp(t Tuple, k int, op Op, f Format) (Tuple, *Error) {
	if !validCode(op.Code) {
		return nil, opError(ErrOp, k, op, 0, "", "unknown operator; the operators are "+operators)
	}
	n, err := resolve(k, op, f, len(t))
	if err != nil {
		return nil, err
	}
	name := ""
	if n <= len(f) {
		name = f[n-1].Name
	}
	fail := func(format string, args ...any) (Tuple, *Error) {
		return nil, opError(ErrOp, k, op, n, name, format, args...)
	}
	i := n - 1
	if op.Convert && op.Code != OpAssign && op.Code != OpInsert {
		return fail("only = and ! convert their operand by the field's type")
	}
	switch op.Code {
	case OpAssign, OpInsert:
		arg := op.Arg
		if op.Convert && n <= len(f) {
			var msg string
			if arg, msg = convertArg(arg, &f[i]); msg != "" {
				return nil, opError(ErrMismatch, k, op, n, name, "%s", msg)
			}
		}
		if op.Code == OpAssign && i < len(t) {
			t[i] = arg
			return t, nil
		}
		if len(t) >= MaxFields {
			return nil, opError(ErrLimit, k, op, n, name, "the tuple already has %d fields, the most allowed", len(t))
		}
		return slices.Insert(t, i, arg), nil
	case OpDelete:
		if op.Count < 1 {
			return fail("delete count %d; it must be at least 1", op.Count)
		}
		return slices.Delete(t, i, i+min(op.Count, len(t)-i)), nil
	case OpAdd, OpSub:
		v, msg := arith(op.Code, t[i], op.Arg)
		if msg != "" {
			return fail("%s", msg)
		}
		t[i] = v
	case OpAnd, OpOr, OpXor:
		a, ok1 := t[i].AsUint()
		b, ok2 := op.Arg.AsUint()
		if !ok1 || !ok2 {
			return fail("bitwise ops need unsigned integers; the field holds %s and the operand is %s", describe(t[i]), describe(op.Arg))
		}
		switch op.Code {
		case OpAnd:
			t[i] = Uint(a & b)
		case OpOr:
			t[i] = Uint(a | b)
		default:
			t[i] = Uint(a ^ b)
		}
	case OpSplice:
		v, msg := splice(t[i], op)
		if msg != "" {
			return fail("%s", msg)
		}
		t[i] = v
	case OpMax, OpMin:
		if !Comparable(t[i], op.Arg) {
			return fail("cannot compare %s with %s", describe(op.Arg), describe(t[i]))
		}
		c := Compare(op.Arg, t[i])
		if op.Code == OpMax && c > 0 || op.Code == OpMin && c < 0 {
			t[i] = op.Arg
		}
	}
	return t, nil
}

// operators lists the update operators as JSON writes them.
const operators = "= + - & | ^ ! # : max min"

// Comparable reports whether a and b are of one kind for max, min and a
// condition's comparison: either is null, both have the same kind, or
// both are integers (negative or not). Compare orders any two values,
// but across kinds it orders the kinds, which a comparison of a field
// with a value does not mean.
func Comparable(a, b Value) bool {
	if a.kind == KindNull || b.kind == KindNull || a.kind == b.kind {
		return true
	}
	ai, bi := a.kind == KindInt || a.kind == KindUint, b.kind == KindInt || b.kind == KindUint
	return ai && bi
}

// convertArg converts the operand of an op with Convert for the field fd,
// as ParseJSONTuple converts an element: it was read as if beyond the
// format (an integer, a double, a string). A value the field's type does
// not take stays as it is, for Check to refuse.
func convertArg(v Value, fd *Field) (Value, string) {
	switch {
	case fd.Type == TypeDouble && v.kind == KindUint:
		return Double(float64(v.num)), ""
	case fd.Type == TypeDouble && v.kind == KindInt:
		return Double(float64(int64(v.num))), ""
	case v.kind == KindString && (fd.Type == TypeBytes || fd.Type == TypeUUID || fd.Type == TypeDouble):
		out, msg := stringFromJSON(v.str, fd, func() string { return "" })
		if out.kind == KindNull && msg == "" {
			return v, "" // a double field and a string other than NaN or an infinity
		}
		return out, msg
	}
	return v, ""
}

// arith adds or subtracts numbers: integers exactly within the int64 and
// uint64 ranges, doubles if either side is one.
func arith(code byte, a, b Value) (Value, string) {
	verb, prep := "add", "to"
	if code == OpSub {
		verb, prep = "subtract", "from"
	}
	if !isNumber(a) || !isNumber(b) {
		return Value{}, "cannot " + verb + " " + b.kind.String() + " " + prep + " " + a.kind.String()
	}
	if a.kind == KindDouble || b.kind == KindDouble {
		x, y := toFloat(a), toFloat(b)
		if code == OpSub {
			return Double(x - y), ""
		}
		return Double(x + y), ""
	}
	an, am := signMag(a)
	bn, bm := signMag(b)
	if code == OpSub && bm != 0 {
		bn = !bn
	}
	var neg bool
	var mag uint64
	switch {
	case an == bn:
		var carry uint64
		mag, carry = bits.Add64(am, bm, 0)
		neg = an
		if carry != 0 || neg && mag > 1<<63 {
			return Value{}, "integer overflow: " + a.String() + " " + string(rune(code)) + " " + b.String()
		}
	case am >= bm:
		neg, mag = an, am-bm
	default:
		neg, mag = bn, bm-am
	}
	if neg && mag != 0 {
		return Int(int64(-mag)), ""
	}
	return Uint(mag), ""
}

func isNumber(v Value) bool {
	return v.kind == KindInt || v.kind == KindUint || v.kind == KindDouble
}

func toFloat(v Value) float64 {
	switch v.kind {
	case KindInt:
		return float64(int64(v.num))
	case KindUint:
		return float64(v.num)
	}
	return math.Float64frombits(v.num)
}

// signMag returns an integer as a sign and a magnitude.
func signMag(v Value) (neg bool, mag uint64) {
	if v.kind == KindInt {
		return true, -v.num
	}
	return false, v.num
}

// splice does ':' on a string field, as Tarantool does.
func splice(v Value, op Op) (Value, string) {
	s, ok := v.AsString()
	if !ok {
		return Value{}, "splice needs a string field; the field holds " + describe(v)
	}
	ins, ok := op.Arg.AsString()
	if !ok {
		return Value{}, "splice inserts a string; the operand is " + describe(op.Arg)
	}
	size := len(s)
	var start int
	switch o := op.Offset; {
	case o == 0:
		return Value{}, "splice offset 0; offsets start at 1 (-1 is after the last byte)"
	case o < 0:
		if o < -(size + 1) {
			return Value{}, "splice offset " + strconv.Itoa(o) + " is before the start of the " + strconv.Itoa(size) + "-byte string"
		}
		start = size + 1 + o
	default:
		start = min(o-1, size)
	}
	rest := size - start
	var cut int
	switch c := op.Count; {
	case c < 0:
		if c >= -rest {
			cut = rest + c
		}
	default:
		cut = min(c, rest)
	}
	return String(s[:start] + ins + s[start+cut:]), ""
}
