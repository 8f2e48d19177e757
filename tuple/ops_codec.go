package tuple

import (
	"encoding/binary"
	"encoding/json"
	"strconv"
)

// ParseJSONOps parses an update written as a JSON array of ops, as the CLI
// and the HTTP API take it:
//
//	[["=", "name", "x"], ["+", "price", 1.5], ["!", 2, "new"], ["#", 3, 1],
//	 [":", "name", 1, 2, "ab"], ["max", "seen", 7], ["min", "low", 0.5]]
//
// Each op is the operator, the field (its name in f, or its 1-based
// number, negative from the end) and the operator's arguments: one value
// for = + - & | ^ ! max min, the count for #, the offset, count and string
// for :. The value of = ! max min is converted by the target field's
// declaration when f declares it, as ParseJSONTuple converts a field; that
// of + and - is a number (a double when the field is a double), that of
// & | ^ an unsigned integer. A negative field number counts from the end of the tuple, which
// only the server knows: the value of its = or ! is converted when the op
// is applied, by the field it lands on (Op.Convert), so that
// ["=", -1, 2] converts as ["=", "price", 2] does when price is the last
// field. Errors name the op (1-based) and its field.
func ParseJSONOps(data []byte, f Format) ([]Op, error) {
	var ops []Op
	err := parseJSONArray(data, "update", "ops", MaxOps, func(i int, raw []byte) error {
		op, err := opFromJSON(i+1, raw, f)
		if err != nil {
			return err
		}
		ops = append(ops, op)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ops, nil
}

func opFromJSON(k int, raw []byte, f Format) (Op, *Error) {
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return Op{}, newOpError(k, "must be an array like [\"=\", \"name\", value], got %s", describeJSON(raw))
	}
	if len(elems) < 2 {
		return Op{}, newOpError(k, "must have an operator and a field, as in [\"=\", \"name\", value]")
	}
	var name string
	if json.Unmarshal(elems[0], &name) != nil {
		return Op{}, newOpError(k, "unknown operator %s; the operators are %s", describeJSON(elems[0]), operators)
	}
	code, ok := opCode(name)
	if !ok {
		return Op{}, newOpError(k, "unknown operator %s; the operators are %s", describeJSON(elems[0]), operators)
	}
	op := Op{Code: code}
	fail := func(format string) (Op, *Error) {
		e := newError(ErrOp, "op %d (%s on field %s): %s", k, strconv.Quote(name), shorten(string(elems[1])), format)
		e.Op = k
		return Op{}, e
	}
	switch c := elems[1][0]; {
	case c == '"':
		if json.Unmarshal(elems[1], &op.Field.Name) != nil || op.Field.Name == "" {
			return fail("a field name is not empty")
		}
	case c == '-' || '0' <= c && c <= '9':
		n, err := strconv.ParseInt(string(elems[1]), 10, 0)
		if err != nil || n == 0 {
			return fail("a field is a name or a number (from 1, or from -1 at the end)")
		}
		op.Field.Number = int(n)
	default:
		return fail("a field is a name or a number")
	}

	// From here on the op's own label names it, and its field when f
	// declares it.
	i := -1
	switch n := op.Field.Number; {
	case op.Field.Name != "":
		var ok bool
		if i, ok = f.Index(op.Field.Name); !ok {
			return Op{}, opError(ErrOp, k, op, 0, "", "no field is named %s in the format", quoteShort(op.Field.Name))
		}
	case n > 0 && n <= len(f):
		i = n - 1
	}
	var fd *Field
	n, name := 0, ""
	if i >= 0 {
		fd = &f[i]
		n, name = i+1, fd.Name
	}
	bad := func(class error, format string, args ...any) (Op, *Error) {
		return Op{}, opError(class, k, op, n, name, format, args...)
	}
	args := elems[2:]
	want := 1
	if op.Code == OpSplice {
		want = 3
	}
	if len(args) != want {
		what := "one value"
		switch op.Code {
		case OpDelete:
			what = "the count of fields to delete"
		case OpSplice:
			what = "an offset, a count and a string"
		}
		return bad(ErrOp, "takes %s after the field, got %d arguments", what, len(args))
	}
	arg := args[len(args)-1]
	switch op.Code {
	case OpMax, OpMin:
		// The operand is converted by the field when f declares it; for
		// a negative field number it is read as beyond the format, and
		// ApplyOps refuses a kind the field's value cannot be compared
		// with.
		v, msg := fromJSON(arg, fd)
		if msg != "" {
			return bad(ErrMismatch, "%s", msg)
		}
		op.Arg = v
	case OpAssign, OpInsert:
		// A negative number names a field only once the tuple's length is
		// known: a number or a string is read as beyond the format, and
		// ApplyOps converts it by the field it lands on (Op.Convert).
		op.Convert = op.Field.Number < 0 && len(f) > 0 && (arg[0] == '"' || isJSONNumber(arg))
		v, msg := fromJSON(arg, fd)
		if msg != "" && op.Convert && isJSONNumber(arg) {
			// An integer out of the int64 and uint64 ranges may be meant
			// for a double field.
			if d, dmsg := parseDouble(string(arg)); dmsg == "" {
				v, msg = d, ""
			}
		}
		if msg != "" {
			return bad(ErrMismatch, "%s", msg)
		}
		op.Arg = v
	case OpAdd, OpSub:
		if !isJSONNumber(arg) {
			return bad(ErrOp, "the operand must be a number, got %s", describeJSON(arg))
		}
		num := string(arg)
		var msg string
		if fd != nil && fd.Type == TypeDouble {
			op.Arg, msg = parseDouble(num)
		} else {
			op.Arg, msg = numberFromJSON(num, nil, nil)
		}
		if msg != "" {
			return bad(ErrMismatch, "%s", msg)
		}
	case OpAnd, OpOr, OpXor:
		u, err := strconv.ParseUint(string(arg), 10, 64)
		if err != nil {
			return bad(ErrOp, "the operand must be an unsigned integer, got %s", describeJSON(arg))
		}
		op.Arg = Uint(u)
	case OpDelete:
		c, err := strconv.ParseInt(string(arg), 10, 0)
		if err != nil || c < 1 {
			return bad(ErrOp, "the count of fields to delete must be a positive integer, got %s", describeJSON(arg))
		}
		op.Count = int(c)
	case OpSplice:
		o, err1 := strconv.ParseInt(string(args[0]), 10, 0)
		c, err2 := strconv.ParseInt(string(args[1]), 10, 0)
		if err1 != nil || err2 != nil {
			return bad(ErrOp, "the offset and count of a splice must be integers, got %s and %s", describeJSON(args[0]), describeJSON(args[1]))
		}
		if arg[0] != '"' {
			return bad(ErrOp, "a splice inserts a string, got %s", describeJSON(arg))
		}
		s, msg := jsonString(arg)
		if msg != "" {
			return bad(ErrMismatch, "%s", msg)
		}
		op.Offset, op.Count, op.Arg = int(o), int(c), String(s)
	}
	return op, nil
}

// newOpError is a refusal of op k before its field is known.
func newOpError(k int, format string, args ...any) *Error {
	e := newError(ErrOp, "op %d: "+format, append([]any{k}, args...)...)
	e.Op = k
	return e
}

func isJSONNumber(raw []byte) bool {
	return len(raw) > 0 && (raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9')
}

// convertBit marks the Code byte of an op with Convert. The codes are
// ASCII, so no op without Convert has it: their encoding is unchanged.
const convertBit = 0x80

// minOpSize is the fewest bytes an encoded op takes.
const minOpSize = 6

// AppendOps appends the encoding of an update's ops to dst, to carry them
// in a Raft command. The encoding is frozen: the op count as a uvarint,
// then for each op
//
//	1 byte           Code, with its top bit (0x80) set for Convert
//	varint           Field.Number (zigzag, as binary.AppendVarint)
//	uvarint + bytes  Field.Name: its length, then its bytes
//	value            Arg, as a field of the tuple encoding (AppendTuple)
//	varint           Count
//	varint           Offset
//
// Every field of every op is written, so DecodeOps returns exactly the ops
// given; it refuses an unknown operator and more than MaxOps ops.
func AppendOps(dst []byte, ops []Op) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ops)))
	for _, op := range ops {
		code := op.Code
		if op.Convert {
			code |= convertBit
		}
		dst = append(dst, code)
		dst = binary.AppendVarint(dst, int64(op.Field.Number))
		dst = binary.AppendUvarint(dst, uint64(len(op.Field.Name)))
		dst = append(dst, op.Field.Name...)
		dst = appendValue(dst, op.Arg)
		dst = binary.AppendVarint(dst, int64(op.Count))
		dst = binary.AppendVarint(dst, int64(op.Offset))
	}
	return dst
}

// DecodeOps reads ops written by AppendOps. It refuses (ErrMalformed)
// anything AppendOps cannot have written from valid operators, and more
// than MaxOps ops (ErrLimit); it never panics, and allocates in proportion
// to len(b). It checks the encoding, not the ops: ApplyOps does that.
func DecodeOps(b []byte) ([]Op, error) {
	r := reader{b: b, share: true}
	n, err := r.uvarint()
	if err != nil {
		return nil, newError(ErrMalformed, "op count: %s", err.msg)
	}
	if n > MaxOps {
		return nil, newError(ErrLimit, "the update has %d ops; at most %d are allowed", n, MaxOps)
	}
	if left := len(b) - r.pos; n > uint64(left/minOpSize) {
		return nil, newError(ErrMalformed, "the update claims %d ops but only %d bytes follow", n, left)
	}
	ops := make([]Op, n)
	for k := range ops {
		start := r.pos
		if ops[k], err = r.op(); err != nil {
			e := newError(ErrMalformed, "op %d: %s at byte %d", k+1, err.msg, start)
			e.Op = k + 1
			return nil, e
		}
	}
	if r.pos != len(b) {
		return nil, newError(ErrMalformed, "%d bytes after the last op, at byte %d", len(b)-r.pos, r.pos)
	}
	return ops, nil
}

func (r *reader) op() (Op, *Error) {
	var op Op
	if err := r.need(1, "op"); err != nil {
		return op, err
	}
	code := r.b[r.pos]
	r.pos++
	op.Code, op.Convert = code&^convertBit, code&convertBit != 0
	switch {
	case !validCode(op.Code):
		return op, newError(ErrMalformed, "unknown operator 0x%02x", code)
	case op.Convert && op.Code != OpAssign && op.Code != OpInsert:
		return op, newError(ErrMalformed, "operator 0x%02x: only = and ! convert their operand", code)
	}
	var err *Error
	if op.Field.Number, err = r.varint("field number"); err != nil {
		return op, err
	}
	n, err := r.length("field name")
	if err != nil {
		return op, err
	}
	op.Field.Name = r.str(n)
	if op.Arg, err = r.value(); err != nil {
		return op, newError(ErrMalformed, "operand: %s", err.msg)
	}
	if op.Count, err = r.varint("count"); err != nil {
		return op, err
	}
	if op.Offset, err = r.varint("offset"); err != nil {
		return op, err
	}
	return op, nil
}

// varint reads a zigzag varint that must fit an int.
func (r *reader) varint(what string) (int, *Error) {
	u, err := r.uvarint()
	if err != nil {
		return 0, newError(ErrMalformed, "%s: %s", what, err.msg)
	}
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	if int64(int(x)) != x {
		return 0, newError(ErrMalformed, "%s %d does not fit an int", what, x)
	}
	return int(x), nil
}
