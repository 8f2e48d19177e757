package tuple

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
)

func opsFormat(tb testing.TB) Format {
	tb.Helper()
	return mustFormat(tb, "id:unsigned", "name:string", "count:unsigned", "price:double", "delta:integer?")
}

func TestApplyOps(t *testing.T) {
	t.Parallel()
	f := opsFormat(t)
	base := Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Int(-3)}
	byName := func(code byte, name string, arg Value) Op {
		return Op{Code: code, Field: FieldRef{Name: name}, Arg: arg}
	}
	byNum := func(code byte, n int, arg Value) Op { return Op{Code: code, Field: FieldRef{Number: n}, Arg: arg} }
	for _, c := range []struct {
		name string
		ops  []Op
		want Tuple
	}{
		{"no ops", nil, base},
		{"assign by name", []Op{byName('=', "name", String("ink"))}, Tuple{Uint(1), String("ink"), Uint(10), Double(1.5), Int(-3)}},
		{"assign by number from the end", []Op{byNum('=', -1, Null())}, Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Null()}},
		{"assign appends", []Op{byNum('=', 6, String("x"))}, append(base[:5:5], String("x"))},
		{"add unsigned", []Op{byName('+', "count", Uint(5))}, Tuple{Uint(1), String("pen"), Uint(15), Double(1.5), Int(-3)}},
		{"subtract to zero", []Op{byName('-', "count", Uint(10))}, Tuple{Uint(1), String("pen"), Uint(0), Double(1.5), Int(-3)}},
		{"add a negative", []Op{byName('+', "count", Int(-4))}, Tuple{Uint(1), String("pen"), Uint(6), Double(1.5), Int(-3)}},
		{"integer reaches its minimum", []Op{byName('-', "delta", Uint(math.MaxInt64-3)), byName('-', "delta", Uint(1))},
			Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Int(math.MinInt64)}},
		{"integer crosses zero", []Op{byName('+', "delta", Uint(10))}, Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Uint(7)}},
		{"double plus integer", []Op{byName('+', "price", Uint(2))}, Tuple{Uint(1), String("pen"), Uint(10), Double(3.5), Int(-3)}},
		{"double minus double", []Op{byName('-', "price", Double(0.5))}, Tuple{Uint(1), String("pen"), Uint(10), Double(1), Int(-3)}},
		{"bitwise", []Op{byName('|', "count", Uint(5)), byName('&', "count", Uint(6)), byName('^', "count", Uint(1))},
			Tuple{Uint(1), String("pen"), Uint(7), Double(1.5), Int(-3)}}, // (10|5)&6 = 6, 6^1 = 7
		{"insert before", []Op{byNum('!', 2, String("new")), {Code: '#', Field: FieldRef{Number: 2}, Count: 1}}, base},
		{"insert appends", []Op{byNum('!', 6, Uint(9))}, append(base[:5:5], Uint(9))},
		{"insert -1 appends", []Op{byNum('!', -1, Uint(9))}, append(base[:5:5], Uint(9))},
		{"delete the nullable tail", []Op{{Code: '#', Field: FieldRef{Number: 5}, Count: 1}}, base[:4]},
		{"delete clamps at the end", []Op{{Code: '#', Field: FieldRef{Number: -1}, Count: 100}}, base[:4]},
		{"splice", []Op{{Code: ':', Field: FieldRef{Name: "name"}, Offset: 2, Count: 1, Arg: String("aw")}},
			Tuple{Uint(1), String("pawn"), Uint(10), Double(1.5), Int(-3)}},
		{"ops see earlier ops", []Op{byNum('=', 6, Uint(1)), byNum('+', 6, Uint(1)), byNum('+', -1, Uint(1))},
			append(base[:5:5], Uint(3))},
		{"max raises", []Op{byName(OpMax, "count", Uint(12))}, Tuple{Uint(1), String("pen"), Uint(12), Double(1.5), Int(-3)}},
		{"max keeps a greater field", []Op{byName(OpMax, "count", Uint(9))}, base},
		{"max of equal values", []Op{byName(OpMax, "count", Uint(10))}, base},
		{"min lowers", []Op{byName(OpMin, "price", Double(0.25))}, Tuple{Uint(1), String("pen"), Uint(10), Double(0.25), Int(-3)}},
		{"min keeps a lesser field", []Op{byName(OpMin, "price", Double(2))}, base},
		{"max of a negative and an unsigned", []Op{byName(OpMax, "delta", Uint(4))}, Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Uint(4)}},
		{"min of integers", []Op{byName(OpMin, "delta", Int(-7))}, Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Int(-7)}},
		{"max of strings", []Op{byName(OpMax, "name", String("pin")), byName(OpMax, "name", String("ink"))}, Tuple{Uint(1), String("pin"), Uint(10), Double(1.5), Int(-3)}},
		{"max on a null field", []Op{byName('=', "delta", Null()), byName(OpMax, "delta", Int(-1))}, append(base[:4:4], Int(-1))},
		{"min with null makes null", []Op{byName(OpMin, "delta", Null())}, append(base[:4:4], Null())},
	} {
		in := append(Tuple(nil), base...)
		got, err := ApplyOps(in, c.ops, f)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("%s: ApplyOps = %v, %v; want %v", c.name, got, err, c.want)
		}
		if !in.Equal(base) {
			t.Errorf("%s: ApplyOps changed its input to %v", c.name, in)
		}
	}
}

func TestSplice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s             string
		offset, count int
		ins, want     string
	}{
		{"something to splice", 1, 4, "no", "nothing to splice"},
		{"abc", 1, 0, "x", "xabc"},
		{"abc", 4, 0, "x", "abcx"},
		{"abc", 99, 5, "x", "abcx"}, // past the end: the end
		{"abc", -1, 0, "x", "abcx"}, // -1: after the last byte
		{"abc", -4, 1, "x", "xbc"},  // -len-1: the start
		{"abcdef", 2, -1, "", "af"}, // a negative count keeps that many at the end
		{"abcdef", 2, -9, "x", "axbcdef"},
		{"abcdef", 2, 99, "", "a"},
		{"", 1, 1, "x", "x"},
	} {
		got, msg := splice(String(c.s), Op{Code: ':', Offset: c.offset, Count: c.count, Arg: String(c.ins)})
		if msg != "" || got != String(c.want) {
			t.Errorf("splice(%q, %d, %d, %q) = %v, %q; want %q", c.s, c.offset, c.count, c.ins, got, msg, c.want)
		}
	}
}

func TestApplyOpsRefusals(t *testing.T) {
	t.Parallel()
	f := opsFormat(t)
	base := Tuple{Uint(1), String("pen"), Uint(10), Double(1.5)}
	for _, c := range []struct {
		name      string
		ops       []Op
		want      string
		class     error
		op, field int
	}{
		{"string to double", []Op{{Code: '=', Field: FieldRef{Number: 1}, Arg: Uint(2)}, {Code: '+', Field: FieldRef{Name: "price"}, Arg: String("x")}},
			`op 2 ("+" on field 4 (price)): cannot add string to double`, ErrOp, 2, 4},
		{"subtract null", []Op{{Code: '-', Field: FieldRef{Number: 3}}}, `op 1 ("-" on field 3 (count)): cannot subtract null from unsigned`, ErrOp, 1, 3},
		{"overflow", []Op{{Code: '+', Field: FieldRef{Number: 3}, Arg: Uint(math.MaxUint64)}},
			`op 1 ("+" on field 3 (count)): integer overflow: 10 + 18446744073709551615`, ErrOp, 1, 3},
		{"negative overflow", []Op{{Code: '=', Field: FieldRef{Number: 5}, Arg: Int(-2)}, {Code: '-', Field: FieldRef{Number: 5}, Arg: Uint(math.MaxInt64)}},
			`op 2 ("-" on field 5 (delta)): integer overflow: -2 - 9223372036854775807`, ErrOp, 2, 5},
		{"unsigned goes negative", []Op{{Code: '-', Field: FieldRef{Name: "count"}, Arg: Uint(11)}},
			"the updated tuple does not fit the format: field 3 (count): expected unsigned, got integer -1", ErrMismatch, 0, 3},
		{"unknown name", []Op{{Code: '=', Field: FieldRef{Name: "nope"}}}, `op 1 ("=" on field "nope"): no field is named "nope" in the format`, ErrOp, 1, 0},
		{"both", []Op{{Code: '=', Field: FieldRef{Name: "id", Number: 1}}}, "both by name and by number 1", ErrOp, 1, 0},
		{"neither", []Op{{Code: '='}}, `op 1 ("=" on field 0): no field given`, ErrOp, 1, 0},
		{"past the end", []Op{{Code: '+', Field: FieldRef{Number: 5}, Arg: Uint(1)}}, `op 1 ("+" on field 5 (delta)): the tuple has only 4 fields`, ErrOp, 1, 5},
		{"assign two past the end", []Op{{Code: '=', Field: FieldRef{Number: 6}}}, `op 1 ("=" on field 6): the tuple has only 4 fields`, ErrOp, 1, 6},
		{"before the start", []Op{{Code: '=', Field: FieldRef{Number: -5}}}, `op 1 ("=" on field -5): the tuple has only 4 fields`, ErrOp, 1, 0},
		{"min int", []Op{{Code: '!', Field: FieldRef{Number: math.MinInt}}}, "the tuple has only 4 fields", ErrOp, 1, 0},
		{"unknown operator", []Op{{Code: '?', Field: FieldRef{Number: 1}}}, `op 1 ("?" on field 1): unknown operator`, ErrOp, 1, 0},
		{"delete zero", []Op{{Code: '#', Field: FieldRef{Number: 1}}}, `op 1 ("#" on field 1 (id)): delete count 0; it must be at least 1`, ErrOp, 1, 1},
		{"delete a needed field", []Op{{Code: '#', Field: FieldRef{Number: 2}, Count: 1}},
			"the updated tuple does not fit the format: field 2 (name): expected string, got unsigned 10", ErrMismatch, 0, 2},
		{"bitwise on a double", []Op{{Code: '&', Field: FieldRef{Name: "price"}, Arg: Uint(1)}},
			`op 1 ("&" on field 4 (price)): bitwise ops need unsigned integers; the field holds double 1.5 and the operand is unsigned 1`, ErrOp, 1, 4},
		{"bitwise with a negative", []Op{{Code: '|', Field: FieldRef{Name: "count"}, Arg: Int(-1)}}, "the operand is integer -1", ErrOp, 1, 3},
		{"splice an unsigned", []Op{{Code: ':', Field: FieldRef{Number: 1}, Offset: 1, Arg: String("x")}}, "splice needs a string field; the field holds unsigned 1", ErrOp, 1, 1},
		{"splice bytes in", []Op{{Code: ':', Field: FieldRef{Number: 2}, Offset: 1, Arg: Bytes(nil)}}, "splice inserts a string; the operand is bytes", ErrOp, 1, 2},
		{"splice at 0", []Op{{Code: ':', Field: FieldRef{Number: 2}, Arg: String("")}}, "splice offset 0", ErrOp, 1, 2},
		{"splice before the start", []Op{{Code: ':', Field: FieldRef{Number: 2}, Offset: -5, Arg: String("")}}, "splice offset -5 is before the start of the 3-byte string", ErrOp, 1, 2},
		{"splice cuts a character in two", []Op{{Code: ':', Field: FieldRef{Number: 2}, Offset: 2, Count: 1, Arg: String("\u00e9")}, {Code: ':', Field: FieldRef{Number: 2}, Offset: 3, Count: 1, Arg: String("")}},
			"the updated tuple does not fit the format: field 2 (name): the string is not valid UTF-8: byte 0xc3 at offset 1", ErrMismatch, 0, 2},
		{"convert on +", []Op{{Code: '+', Field: FieldRef{Number: -1}, Arg: Uint(1), Convert: true}}, `op 1 ("+" on field 4 (price)): only = and ! convert their operand`, ErrOp, 1, 4},
		{"convert leaves a string that is no double", []Op{{Code: '=', Field: FieldRef{Number: 4}, Arg: String("x"), Convert: true}},
			`the updated tuple does not fit the format: field 4 (price): expected double, got string "x"`, ErrMismatch, 0, 4},
		{"too many ops", make([]Op, MaxOps+1), "1001 ops; at most 1000", ErrLimit, 0, 0},
		{"max of a string and an unsigned", []Op{{Code: OpMax, Field: FieldRef{Name: "count"}, Arg: String("9")}},
			`op 1 ("max" on field 3 (count)): cannot compare string "9" with unsigned 10`, ErrOp, 1, 3},
		{"min of an integer and a double", []Op{{Code: OpMin, Field: FieldRef{Name: "price"}, Arg: Uint(1)}},
			`op 1 ("min" on field 4 (price)): cannot compare unsigned 1 with double 1.5`, ErrOp, 1, 4},
		{"max past the end", []Op{{Code: OpMax, Field: FieldRef{Number: 5}, Arg: Uint(1)}}, `op 1 ("max" on field 5 (delta)): the tuple has only 4 fields`, ErrOp, 1, 5},
		{"min null into a field that is not nullable", []Op{{Code: OpMin, Field: FieldRef{Name: "count"}, Arg: Null()}},
			"the updated tuple does not fit the format: field 3 (count): expected unsigned, got null", ErrMismatch, 0, 3},
	} {
		got, err := ApplyOps(base, c.ops, f)
		var e *Error
		if !errors.Is(err, c.class) || !errors.As(err, &e) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ApplyOps = %v, %v; want %v containing %q", c.name, got, err, c.class, c.want)
			continue
		}
		if e.Op != c.op || e.Field != c.field {
			t.Errorf("%s: error places op %d field %d, want op %d field %d", c.name, e.Op, e.Field, c.op, c.field)
		}
	}
	many := make(Tuple, MaxFields)
	if _, err := ApplyOps(many, []Op{{Code: '!', Field: FieldRef{Number: 1}}}, nil); !errors.Is(err, ErrLimit) {
		t.Errorf("inserting into a full tuple: %v", err)
	}
}

func TestParseJSONOps(t *testing.T) {
	t.Parallel()
	f := opsFormat(t)
	ops, err := ParseJSONOps([]byte(`[["=", "name", "x"], ["+", "price", 1], ["!", 2, "new"], ["#", 3, 1],
		["-", "count", 2], ["+", -1, 1.5], ["|", 3, 6], [":", "name", -1, 0, "!"], ["=", -2, 1], ["=", 4, 7], ["=", 9, 7], ["=", "delta", null],
		["max", "count", 3], ["min", "price", 2], ["max", -1, 5], ["min", "delta", null]]`), f)
	if err != nil {
		t.Fatal(err)
	}
	want := []Op{
		{Code: '=', Field: FieldRef{Name: "name"}, Arg: String("x")},
		{Code: '+', Field: FieldRef{Name: "price"}, Arg: Double(1)},
		{Code: '!', Field: FieldRef{Number: 2}, Arg: String("new")},
		{Code: '#', Field: FieldRef{Number: 3}, Count: 1},
		{Code: '-', Field: FieldRef{Name: "count"}, Arg: Uint(2)},
		{Code: '+', Field: FieldRef{Number: -1}, Arg: Double(1.5)},
		{Code: '|', Field: FieldRef{Number: 3}, Arg: Uint(6)},
		{Code: ':', Field: FieldRef{Name: "name"}, Offset: -1, Count: 0, Arg: String("!")},
		{Code: '=', Field: FieldRef{Number: -2}, Arg: Uint(1), Convert: true}, // converted by the field it lands on
		{Code: '=', Field: FieldRef{Number: 4}, Arg: Double(7)},               // the price field makes it a double
		{Code: '=', Field: FieldRef{Number: 9}, Arg: Uint(7)},                 // beyond the format: inferred
		{Code: '=', Field: FieldRef{Name: "delta"}, Arg: Null()},
		{Code: OpMax, Field: FieldRef{Name: "count"}, Arg: Uint(3)},
		{Code: OpMin, Field: FieldRef{Name: "price"}, Arg: Double(2)}, // the price field makes it a double
		{Code: OpMax, Field: FieldRef{Number: -1}, Arg: Uint(5)},      // beyond the format: inferred
		{Code: OpMin, Field: FieldRef{Name: "delta"}, Arg: Null()},
	}
	if len(ops) != len(want) {
		t.Fatalf("ParseJSONOps = %v", ops)
	}
	for i := range want {
		if ops[i] != want[i] {
			t.Errorf("op %d = %+v, want %+v", i+1, ops[i], want[i])
		}
	}
	for _, c := range []struct {
		in, want string
		class    error
	}{
		{`[["=", "price", "x"]]`, `op 1 ("=" on field 4 (price)): expected double, got string "x"`, ErrMismatch},
		{`[["=", "name", "x"], ["+", "price", "x"]]`, `op 2 ("+" on field 4 (price)): the operand must be a number, got string "x"`, ErrOp},
		{`[["=", "id", null]]`, `op 1 ("=" on field 1 (id)): expected unsigned, got null (the field is not nullable)`, ErrMismatch},
		{`[["?", 1, 1]]`, `op 1: unknown operator string "?"`, ErrOp},
		{`[["==", 1, 1]]`, `unknown operator string "=="`, ErrOp},
		{`[[">", 3, 1]]`, `op 1: unknown operator string ">"; the operators are = + - & | ^ ! # : max min`, ErrOp},
		{`[["MAX", 3, 1]]`, `unknown operator string "MAX"`, ErrOp},
		{`[["max", "count", "x"]]`, `op 1 ("max" on field 3 (count)): expected unsigned, got string "x"`, ErrMismatch},
		{`[["min", "count"]]`, `op 1 ("min" on field 3 (count)): takes one value after the field, got 0 arguments`, ErrOp},
		{`[["max", "nope", 1]]`, `op 1 ("max" on field "nope"): no field is named "nope"`, ErrOp},
		{`[[1, 1, 1]]`, `unknown operator number 1`, ErrOp},
		{`[["=", 0, 1]]`, `op 1 ("=" on field 0): a field is a name or a number`, ErrOp},
		{`[["=", 1.5, 1]]`, `op 1 ("=" on field 1.5): a field is a name or a number`, ErrOp},
		{`[["=", "", 1]]`, `a field name is not empty`, ErrOp},
		{`[["=", null, 1]]`, `op 1 ("=" on field null): a field is a name or a number`, ErrOp},
		{`[["=", "nope", 1]]`, `op 1 ("=" on field "nope"): no field is named "nope"`, ErrOp},
		{`[["="]]`, `op 1: must have an operator and a field`, ErrOp},
		{`[["=", 1]]`, `op 1 ("=" on field 1 (id)): takes one value after the field, got 0 arguments`, ErrOp},
		{`[["#", 1, 1, 2]]`, `takes the count of fields to delete after the field, got 2 arguments`, ErrOp},
		{`[[":", 2, 1, "x"]]`, `takes an offset, a count and a string after the field, got 2 arguments`, ErrOp},
		{`[["#", 1, 0]]`, `the count of fields to delete must be a positive integer, got number 0`, ErrOp},
		{`[["#", 1, "1"]]`, `must be a positive integer, got string "1"`, ErrOp},
		{`[["&", 3, -1]]`, `op 1 ("&" on field 3 (count)): the operand must be an unsigned integer, got number -1`, ErrOp},
		{`[["+", 3, 1e999]]`, `number 1e999 is out of the range of double`, ErrMismatch},
		{`[["+", 3, 99999999999999999999]]`, `out of the range of integer`, ErrMismatch},
		{`[[":", 2, 1.5, 1, "x"]]`, `the offset and count of a splice must be integers, got number 1.5 and number 1`, ErrOp},
		{`[[":", 2, 1, 1, 5]]`, `a splice inserts a string, got number 5`, ErrOp},
		{`[5]`, `op 1: must be an array like ["=", "name", value], got number 5`, ErrOp},
		{`{}`, `the update must be a JSON array, got an object`, ErrSyntax},
		{`[["=", 1, 1]`, `the update is not valid JSON`, ErrSyntax},
		{`[` + strings.Repeat(`["=", 1, 1],`, MaxOps) + `["=", 1, 1]]`, "the update has more than 1000 ops", ErrLimit},
	} {
		got, err := ParseJSONOps([]byte(c.in), f)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseJSONOps(%.60s) = %v, %v; want %v containing %q", c.in, got, err, c.class, c.want)
		}
	}
}

// A negative field number converts its value as the field's name or
// positive number does, by the field it lands on once the tuple's length
// is known (Tarantool counts from the end of the tuple).
func TestNegativeFieldNumbersConvertAsNamesDo(t *testing.T) {
	t.Parallel()
	f := mustFormat(t, "id:unsigned", "price:double", "blob:bytes", "ref:uuid", "name:string", "note:double?")
	ref, _ := ParseUUID("123e4567-e89b-12d3-a456-426614174000")
	base := Tuple{Uint(1), Double(1.5), Bytes(nil), ref, String("n")} // note missing
	extra := append(base[:5:5], Null(), String("x"))                  // note null, one field beyond
	with := func(tup Tuple, i int, v Value) Tuple {
		out := append(Tuple(nil), tup...)
		out[i] = v
		return out
	}
	for _, c := range []struct {
		tup  Tuple
		ops  []string // each gives want
		want Tuple
	}{
		{base, []string{`[["=", -4, 2]]`, `[["=", "price", 2]]`, `[["=", 2, 2]]`}, with(base, 1, Double(2))},
		{base, []string{`[["=", -4, -2]]`, `[["=", "price", -2]]`}, with(base, 1, Double(-2))},
		{base, []string{`[["=", -4, "-Infinity"]]`, `[["=", "price", "-Infinity"]]`}, with(base, 1, Double(math.Inf(-1)))},
		{base, []string{`[["=", -4, 99999999999999999999]]`, `[["=", "price", 99999999999999999999]]`}, with(base, 1, Double(1e20))},
		{base, []string{`[["=", -3, "AQI="]]`, `[["=", "blob", "AQI="]]`}, with(base, 2, Bytes([]byte{1, 2}))},
		{base, []string{`[["=", -2, "123E4567-E89B-12D3-A456-426614174000"]]`, `[["=", "ref", "123e4567-e89b-12d3-a456-426614174000"]]`}, base},
		{base, []string{`[["=", -1, "AQI="]]`, `[["=", "name", "AQI="]]`}, with(base, 4, String("AQI="))},
		{base, []string{`[["!", -1, 5]]`, `[["!", 6, 5]]`}, append(base[:5:5], Double(5))}, // appends the note field
		{extra, []string{`[["=", -6, 3]]`, `[["=", "price", 3]]`}, with(extra, 1, Double(3))},
		{extra, []string{`[["=", -2, 3]]`, `[["=", "note", 3]]`}, with(extra, 5, Double(3))},
		{extra, []string{`[["=", -1, 3]]`, `[["=", 7, 3]]`}, with(extra, 6, Uint(3))},                  // beyond the format: inferred
		{extra, []string{`[["=", -1, "AQI="]]`, `[["=", 7, "AQI="]]`}, with(extra, 6, String("AQI="))}, // a string stays one
	} {
		for _, in := range c.ops {
			ops, err := ParseJSONOps([]byte(in), f)
			if err != nil {
				t.Errorf("ParseJSONOps(%s): %v", in, err)
				continue
			}
			// As the server gets them.
			if ops, err = DecodeOps(AppendOps(nil, ops)); err != nil {
				t.Errorf("DecodeOps(AppendOps(%s)): %v", in, err)
				continue
			}
			got, err := ApplyOps(c.tup, ops, f)
			if err != nil || !got.Equal(c.want) {
				t.Errorf("ApplyOps(%v, %s) = %v, %v; want %v", c.tup, in, got, err, c.want)
			}
		}
	}
	for in, want := range map[string]string{
		`[["=", -3, "AQI"]]`: `op 1 ("=" on field 3 (blob)): expected bytes as a base64 string, got "AQI"`,
		`[["=", -2, "x"]]`:   `op 1 ("=" on field 4 (ref)): expected a uuid written as 8-4-4-4-12 hex digits, got "x"`,
		`[["=", -4, "x"]]`:   `the updated tuple does not fit the format: field 2 (price): expected double, got string "x"`,
		`[["=", -5, 1.5]]`:   `the updated tuple does not fit the format: field 1 (id): expected unsigned, got double 1.5`,
	} {
		ops, err := ParseJSONOps([]byte(in), f)
		if err != nil {
			t.Errorf("ParseJSONOps(%s): %v", in, err)
			continue
		}
		if got, err := ApplyOps(base, ops, f); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ApplyOps(%s) = %v, %v; want an error containing %q", in, got, err, want)
		}
	}
}

// The ops encoding is frozen: these bytes must never change.
func TestAppendOpsGolden(t *testing.T) {
	t.Parallel()
	ops := []Op{
		{Code: '=', Field: FieldRef{Name: "ab"}, Arg: String("x")},
		{Code: '#', Field: FieldRef{Number: -1}, Count: 2},
		{Code: ':', Field: FieldRef{Number: 3}, Offset: -2, Count: 1, Arg: String("")},
		{Code: '!', Field: FieldRef{Number: -2}, Arg: Uint(1), Convert: true},
	}
	want := "04" + "3d" + "00" + "026162" + "070178" + "00" + "00" +
		"23" + "01" + "00" + "01" + "04" + "00" +
		"3a" + "06" + "00" + "0700" + "02" + "03" +
		"a1" + "03" + "00" + "0501" + "00" + "00"
	got := AppendOps(nil, ops)
	if hex.EncodeToString(got) != want {
		t.Errorf("AppendOps = %x, want %s", got, want)
	}
	back, err := DecodeOps(got)
	if err != nil || len(back) != len(ops) {
		t.Fatalf("DecodeOps = %v, %v", back, err)
	}
	for i := range ops {
		if back[i] != ops[i] {
			t.Errorf("op %d read back as %+v, want %+v", i+1, back[i], ops[i])
		}
	}
}

func TestDecodeOpsRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		hex, want string
		class     error
	}{
		{"", "op count: truncated varint", ErrMalformed},
		{"e907", "1001 ops; at most 1000", ErrLimit},
		{"02" + "3d0000010000", "claims 2 ops but only 6 bytes follow", ErrMalformed},
		{"01" + "3f0000010000", "op 1: unknown operator 0x3f at byte 1", ErrMalformed},
		{"01" + "bf0000010000", "op 1: unknown operator 0xbf at byte 1", ErrMalformed},
		{"01" + "ab0000010000", "op 1: operator 0xab: only = and ! convert their operand at byte 1", ErrMalformed},
		{"01" + "3d0009010000", "op 1: field name of 9 bytes but only 3 follow", ErrMalformed},
		{"01" + "3d00000a0000", "op 1: operand: unknown tag 0x0a", ErrMalformed},
		{"01" + "3d8000010000", "field number: varint not in its shortest form", ErrMalformed},
		{"01" + "3d0000070561", "op 1: operand: string of 5 bytes but only 1 follow", ErrMalformed},
		{"01" + "3d000001008080", "offset: truncated varint", ErrMalformed},
		{"01" + "3d000001000000", "1 bytes after the last op", ErrMalformed},
	} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeOps(b)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeOps(%s) = %v, %v; want %v containing %q", c.hex, got, err, c.class, c.want)
		}
	}
}

func FuzzParseJSONOps(f *testing.F) {
	f.Add([]byte(`[["=", "name", "x"], ["+", "price", 1.5], ["!", 2, "new"], ["#", 3, 1]]`))
	f.Add([]byte(`[[":", "name", -1, -2, "x"], ["^", "count", 3], ["-", -1, 2]]`))
	f.Add([]byte(`[["=", 9, {"a": 1}], ["=", "delta", null]]`))
	f.Add([]byte(`[["=", -2, 1], ["!", -1, "AQI="], ["=", -3, 1e400], ["=", -1, 99999999999999999999]]`))
	f.Add([]byte(`[[":", "name", 1, 0, "\udc00"], ["=", -4, "\ud800\udc00"]]`))
	f.Add([]byte(`[["max", "count", 12], ["min", "price", 0.5], ["max", -1, "x"], ["min", 2, null], ["max", 9, 1]]`))
	f.Add([]byte(`[["max", "delta", -9223372036854775808], ["min", "count", 18446744073709551615], ["max", "name"]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		format := opsFormat(t)
		ops, err := ParseJSONOps(data, format)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		enc := AppendOps(nil, ops)
		back, err := DecodeOps(enc)
		if err != nil || len(back) != len(ops) {
			t.Fatalf("ops %v from %q do not round trip: %v, %v", ops, data, back, err)
		}
		for i := range ops {
			if back[i] != ops[i] {
				t.Fatalf("op %d %+v read back as %+v", i+1, ops[i], back[i])
			}
		}
		base := Tuple{Uint(1), String("pen"), Uint(10), Double(1.5)}
		checkApply(t, base, ops, format)
	})
}

func FuzzDecodeOps(f *testing.F) {
	f.Add(AppendOps(nil, []Op{{Code: '=', Field: FieldRef{Name: "ab"}, Arg: String("x")}, {Code: '#', Field: FieldRef{Number: -1}, Count: 2}}))
	f.Add(AppendOps(nil, []Op{{Code: ':', Field: FieldRef{Number: 3}, Offset: -2, Count: 1, Arg: String("")}}))
	f.Add([]byte{0x01, 0x3d, 0x00, 0x80})
	f.Add(AppendOps(nil, []Op{{Code: OpMax, Field: FieldRef{Name: "n"}, Arg: Uint(7)}, {Code: OpMin, Field: FieldRef{Number: 2}, Arg: Int(-1)}}))
	f.Add(AppendOps(nil, []Op{{Code: '!', Field: FieldRef{Number: -1}, Arg: String("AQI="), Convert: true}}))
	f.Add([]byte{0x01, 0xab, 0x00, 0x00, 0x01, 0x00, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := DecodeOps(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if again := AppendOps(nil, ops); !bytes.Equal(again, b) {
			t.Fatalf("DecodeOps(%x) = %v, which encodes as %x", b, ops, again)
		}
	})
}

// FuzzApplyOps applies any decodable ops to any decodable tuple: it must
// never panic, never change its input, and return only tuples its format
// accepts.
func FuzzApplyOps(f *testing.F) {
	base := AppendTuple(nil, Tuple{Uint(1), String("pen"), Uint(10), Double(1.5), Int(-3)})
	f.Add(base, AppendOps(nil, []Op{{Code: '+', Field: FieldRef{Name: "count"}, Arg: Uint(1)}}))
	f.Add(base, AppendOps(nil, []Op{{Code: '-', Field: FieldRef{Number: -1}, Arg: Uint(math.MaxUint64)}}))
	f.Add(base, AppendOps(nil, []Op{{Code: '#', Field: FieldRef{Number: 2}, Count: math.MaxInt}}))
	f.Add(base, AppendOps(nil, []Op{{Code: ':', Field: FieldRef{Number: 2}, Offset: math.MinInt, Count: math.MinInt, Arg: String("x")}}))
	f.Add(base, AppendOps(nil, []Op{{Code: '!', Field: FieldRef{Number: -7}, Arg: Null()}, {Code: '^', Field: FieldRef{Number: 3}, Arg: Uint(3)}}))
	f.Add(base, AppendOps(nil, []Op{{Code: '=', Field: FieldRef{Number: -2}, Arg: Uint(3), Convert: true}, {Code: '!', Field: FieldRef{Number: -1}, Arg: String("NaN"), Convert: true}}))
	f.Add(base, AppendOps(nil, []Op{{Code: OpMax, Field: FieldRef{Name: "count"}, Arg: Uint(11)}, {Code: OpMin, Field: FieldRef{Number: -1}, Arg: Int(-4)}}))
	f.Add(base, AppendOps(nil, []Op{{Code: OpMin, Field: FieldRef{Number: 4}, Arg: Double(math.NaN())}, {Code: OpMax, Field: FieldRef{Number: 2}, Arg: Bytes([]byte("x"))}}))
	f.Fuzz(func(t *testing.T, tb, ob []byte) {
		tup, err := DecodeTuple(tb)
		if err != nil {
			return
		}
		ops, err := DecodeOps(ob)
		if err != nil {
			return
		}
		checkApply(t, tup, ops, opsFormat(t))
		checkApply(t, tup, ops, nil)
	})
}

func checkApply(t *testing.T, tup Tuple, ops []Op, f Format) {
	t.Helper()
	before := append(Tuple(nil), tup...)
	out, err := ApplyOps(tup, ops, f)
	if !tup.Equal(before) {
		t.Fatalf("ApplyOps changed its input from %v to %v", before, tup)
	}
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.Op > len(ops) {
			t.Fatalf("error %v is not an *Error of one of the %d ops", err, len(ops))
		}
		return
	}
	if err := f.Check(out); err != nil {
		t.Fatalf("ApplyOps returned %v, which its format refuses: %v", out, err)
	}
	if len(out) > 0 && len(tup) > 0 && &out[0] == &tup[0] {
		t.Fatal("ApplyOps returned its input's array")
	}
}
