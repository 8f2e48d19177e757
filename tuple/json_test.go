package tuple

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func jsonFormat(tb testing.TB) Format {
	tb.Helper()
	return mustFormat(tb, "id:unsigned", "delta:integer", "price:double", "name:string", "ok:boolean", "blob:bytes", "ref:uuid", "note:string?")
}

func TestParseJSONTuple(t *testing.T) {
	t.Parallel()
	f := jsonFormat(t)
	ref, _ := ParseUUID("123e4567-e89b-12d3-a456-426614174000")
	for _, c := range []struct {
		in   string
		want Tuple
	}{
		{`[1, -2, 9.5, "n", true, "AQI=", "123e4567-e89b-12d3-a456-426614174000", null]`,
			Tuple{Uint(1), Int(-2), Double(9.5), String("n"), Bool(true), Bytes([]byte{1, 2}), ref, Null()}},
		{` [18446744073709551615, -9223372036854775808, 5, "", false, "", "123E4567-E89B-12D3-A456-426614174000"] `,
			Tuple{Uint(math.MaxUint64), Int(math.MinInt64), Double(5), String(""), Bool(false), Bytes(nil), ref}},
		{`[0, 9223372036854775807, -0.0, "x", true, "", "123e4567-e89b-12d3-a456-426614174000", "note", 7, -7, 1.5, 1e3, "s", true, null]`,
			Tuple{Uint(0), Uint(math.MaxInt64), Double(0), String("x"), Bool(true), Bytes(nil), ref, String("note"),
				Uint(7), Int(-7), Double(1.5), Double(1000), String("s"), Bool(true), Null()}},
		{`[1, 1, "NaN", "x", true, "", "123e4567-e89b-12d3-a456-426614174000"]`,
			Tuple{Uint(1), Uint(1), Double(math.NaN()), String("x"), Bool(true), Bytes(nil), ref}},
		{`[1, 1, "-Infinity", "x", true, "", "123e4567-e89b-12d3-a456-426614174000"]`,
			Tuple{Uint(1), Uint(1), Double(math.Inf(-1)), String("x"), Bool(true), Bytes(nil), ref}},
		{`[1, 1, 1e-400, "x\u0000\"", true, "", "123e4567-e89b-12d3-a456-426614174000"]`,
			Tuple{Uint(1), Uint(1), Double(0), String("x\x00\""), Bool(true), Bytes(nil), ref}},
	} {
		got, err := ParseJSONTuple([]byte(c.in), f)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseJSONTuple(%s) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	// Strings that are valid UTF-8 are taken whatever their escapes: a
	// surrogate pair, U+FFFD itself, an escaped backslash before "udc00".
	for in, want := range map[string]string{
		`["\ud83d\ude00"]`:            "\U0001F600",
		`["\uD83D\uDE00x"]`:           "\U0001F600x",
		`["\ufffd"]`:                  "\ufffd",
		"[\"\xef\xbf\xbd\"]":          "\ufffd",
		`["\\udc00"]`:                 `\udc00`,
		`["a\"\\\u00e9\ud800\udc00"]`: "a\"\\\u00e9\U00010000",
	} {
		got, err := ParseJSONTuple([]byte(in), Format{{Name: "s", Type: TypeString}})
		if err != nil || !got.Equal(Tuple{String(want)}) {
			t.Errorf("ParseJSONTuple(%s) = %v, %v; want [%q]", in, got, err, want)
		}
	}
	// 1 for an unsigned field stays exact at the edge of float64.
	got, err := ParseJSONTuple([]byte(`[9007199254740993]`), Format{{Name: "id", Type: TypeUnsigned}})
	if err != nil || got[0] != Uint(9007199254740993) {
		t.Errorf("a 2^53+1 id: %v, %v", got, err)
	}
}

func TestParseJSONTupleRefusals(t *testing.T) {
	t.Parallel()
	f := jsonFormat(t)
	const rest = `"x", true, "", "123e4567-e89b-12d3-a456-426614174000"`
	for _, c := range []struct {
		in, want  string
		class     error
		field     int
		fieldName string
	}{
		{`[1, 2, "x", ` + rest + `]`, `element 3 (price): expected double, got string "x"`, ErrMismatch, 3, "price"},
		{`[-1, 2, 3, ` + rest + `]`, "element 1 (id): expected unsigned, got number -1", ErrMismatch, 1, "id"},
		{`[1.5, 2, 3, ` + rest + `]`, "element 1 (id): expected unsigned, got number 1.5 (an integer is written without a fraction or exponent)", ErrMismatch, 1, "id"},
		{`[1e2, 2, 3, ` + rest + `]`, "element 1 (id): expected unsigned, got number 1e2", ErrMismatch, 1, "id"},
		{`[18446744073709551616, 2, 3, ` + rest + `]`, "element 1 (id): number 18446744073709551616 is out of the range of unsigned", ErrMismatch, 1, "id"},
		{`[1, -9223372036854775809, 3, ` + rest + `]`, "element 2 (delta): number -9223372036854775809 is out of the range of integer", ErrMismatch, 2, "delta"},
		{`[1, "2", 3, ` + rest + `]`, `element 2 (delta): expected integer, got string "2"`, ErrMismatch, 2, "delta"},
		{`[1, 2, 1e400, ` + rest + `]`, "element 3 (price): number 1e400 is out of the range of double", ErrMismatch, 3, "price"},
		{`[1, 2, null, ` + rest + `]`, "element 3 (price): expected double, got null (the field is not nullable)", ErrMismatch, 3, "price"},
		{`[1, 2, 3, 4, true, "", "123e4567-e89b-12d3-a456-426614174000"]`, "element 4 (name): expected string, got number 4", ErrMismatch, 4, "name"},
		{`[1, 2, 3, "x", 1, "", "123e4567-e89b-12d3-a456-426614174000"]`, "element 5 (ok): expected boolean, got number 1", ErrMismatch, 5, "ok"},
		{`[1, 2, 3, "x", true, "AQI", "123e4567-e89b-12d3-a456-426614174000"]`, `element 6 (blob): expected bytes as a base64 string, got "AQI"`, ErrMismatch, 6, "blob"},
		{`[1, 2, 3, "x", true, [1], "123e4567-e89b-12d3-a456-426614174000"]`, "element 6 (blob): expected bytes, got an array", ErrMismatch, 6, "blob"},
		{`[1, 2, 3, "x", true, "", "123e4567"]`, `element 7 (ref): expected a uuid written as 8-4-4-4-12 hex digits, got "123e4567"`, ErrMismatch, 7, "ref"},
		{`[1, 2, 3, ` + rest + `, null, {"a": 1}]`, "element 9: got an object; a field holds a value, not an array or object", ErrMismatch, 9, ""},
		{`[1, 2, 3, ` + rest + `, null, 1e999]`, "element 9: number 1e999 is out of the range of double", ErrMismatch, 9, ""},
		{`[1, 2, 3, ` + rest + `, null, 99999999999999999999]`, "element 9: number 99999999999999999999 is out of the range of integer", ErrMismatch, 9, ""},
		{`[1, 2, 3]`, "field 4 (name): missing", ErrMismatch, 4, "name"},
		{`{"id": 1}`, "the tuple must be a JSON array, got an object", ErrSyntax, 0, ""},
		{`null`, "the tuple must be a JSON array, got null", ErrSyntax, 0, ""},
		{`[1, 2,]`, "the tuple is not valid JSON: invalid character ']'", ErrSyntax, 0, ""},
		{`[1] [2]`, "not valid JSON", ErrSyntax, 0, ""},
		{``, "not valid JSON", ErrSyntax, 0, ""},
		{`[1, 2, 3, "bad\udc00surrogate", true, "", "123e4567-e89b-12d3-a456-426614174000"]`, `element 4 (name): the string has \udc00 at offset 3, a surrogate that is not half of a pair, which is not valid UTF-8`, ErrMismatch, 4, "name"},
		{`[1, 2, 3, "a\uD800", true, "", "123e4567-e89b-12d3-a456-426614174000"]`, `element 4 (name): the string has \ud800 at offset 1, a surrogate`, ErrMismatch, 4, "name"},
		{`[1, 2, 3, "a\ud800\u0041", true, "", "123e4567-e89b-12d3-a456-426614174000"]`, `element 4 (name): the string has \ud800 at offset 1, a surrogate`, ErrMismatch, 4, "name"},
		{`[1, 2, 3, "\ud800\ud800\udc00", true, "", "123e4567-e89b-12d3-a456-426614174000"]`, `element 4 (name): the string has \ud800 at offset 0, a surrogate`, ErrMismatch, 4, "name"},
		{"[1, 2, 3, \"bad\xff\xfe\", true, \"\", \"123e4567-e89b-12d3-a456-426614174000\"]", `element 4 (name): the string is not valid UTF-8: byte 0xff at offset 3 (a string holds text; store bytes in a bytes field)`, ErrMismatch, 4, "name"},
		{`[1, 2, 3, ` + rest + `, null, "\udfff"]`, `element 9: the string has \udfff at offset 0`, ErrMismatch, 9, ""},
		{`[1, 2, 3, ` + rest + `, null` + strings.Repeat(", 1", MaxFields) + `]`, "more than 1000 elements", ErrLimit, 0, ""},
	} {
		got, err := ParseJSONTuple([]byte(c.in), f)
		var e *Error
		if !errors.Is(err, c.class) || !errors.As(err, &e) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseJSONTuple(%.60s) = %v, %v; want %v containing %q", c.in, got, err, c.class, c.want)
			continue
		}
		if e.Field != c.field || e.Name != c.fieldName {
			t.Errorf("ParseJSONTuple(%.60s): error names %d (%s), want %d (%s)", c.in, e.Field, e.Name, c.field, c.fieldName)
		}
	}
}

func TestParseJSONKey(t *testing.T) {
	t.Parallel()
	parts := mustFormat(t, "id:unsigned", "at:double")
	key, err := ParseJSONKey([]byte(`[7, 2]`), parts)
	if err != nil || !Tuple(key).Equal(Tuple{Uint(7), Double(2)}) {
		t.Errorf("ParseJSONKey = %v, %v", key, err)
	}
	if key, err := ParseJSONKey([]byte(`[]`), nil); err != nil || len(key) != 0 {
		t.Errorf("the empty key = %v, %v", key, err)
	}
	for _, c := range []struct {
		in    string
		parts Format
		want  string
		class error
	}{
		{`[7]`, parts, "the key has 1 element; it needs 2 (id, at)", ErrMismatch},
		{`[7, 2, 3]`, parts, "the key has 3 elements; it needs 2 (id, at)", ErrMismatch},
		{`[1]`, nil, "the key has 1 element; it needs none", ErrMismatch},
		{`[7, "x"]`, parts, `key part 2 (at): expected double, got string "x"`, ErrMismatch},
		{`[null, 1]`, parts, "key part 1 (id): expected unsigned, got null", ErrMismatch},
		{`[7, "NaN"]`, parts, "key part 2 (at): NaN cannot be part of a key", ErrNaN},
		{`7`, parts, "the key must be a JSON array, got number 7", ErrSyntax},
		{`[7,`, parts, "the key is not valid JSON", ErrSyntax},
		{`[]`, make(Format, MaxKeyParts+1), "17 parts; at most 16", ErrLimit},
		{`[1]`, Format{{Name: "x"}}, "key part 1 (x): invalid type Type(0)", ErrFormat},
	} {
		got, err := ParseJSONKey([]byte(c.in), c.parts)
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseJSONKey(%s) = %v, %v; want %v containing %q", c.in, got, err, c.class, c.want)
		}
	}
}

func TestAppendJSON(t *testing.T) {
	t.Parallel()
	ref, _ := ParseUUID("123e4567-e89b-12d3-a456-426614174000")
	tup := Tuple{Null(), Bool(true), Int(-5), Uint(math.MaxUint64), Double(1), Double(0.1), Double(1e21), Double(1e-7),
		Double(math.NaN()), Double(math.Inf(1)), Double(math.Inf(-1)), String("a\"\\\n\x01é\xff"), Bytes([]byte{1, 2}), ref}
	want := `[null,true,-5,18446744073709551615,1.0,0.1,1e+21,1e-07,"NaN","Infinity","-Infinity","a\"\\\n\u0001é\ufffd","AQI=","123e4567-e89b-12d3-a456-426614174000"]`
	got := string(AppendJSON(nil, tup))
	if got != want {
		t.Errorf("AppendJSON =\n%s\nwant\n%s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Errorf("AppendJSON wrote invalid JSON: %s", got)
	}
	m, err := json.Marshal(struct{ T Tuple }{tup})
	if err != nil || string(m) != `{"T":`+want+`}` {
		t.Errorf("json.Marshal = %s, %v", m, err)
	}
	// Beyond any format the doubles stay doubles and the integers integers.
	back, err := ParseJSONTuple([]byte(got), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, kind := range []Kind{KindNull, KindBool, KindInt, KindUint, KindDouble, KindDouble, KindDouble, KindDouble} {
		if back[i].Kind() != kind || back[i] != tup[i] {
			t.Errorf("element %d read back as %v %v, want %v", i+1, back[i].Kind(), back[i], tup[i])
		}
	}
}

func ExampleParseJSONTuple() {
	format := Format{
		{Name: "id", Type: TypeUnsigned},
		{Name: "name", Type: TypeString},
		{Name: "price", Type: TypeDouble},
		{Name: "note", Type: TypeString, Nullable: true},
	}
	t, err := ParseJSONTuple([]byte(`[18446744073709551615, "pen", 3]`), format)
	fmt.Println(t, err)
	fmt.Println(string(AppendJSON(nil, t)))

	_, err = ParseJSONTuple([]byte(`[1, "pen", "cheap"]`), format)
	fmt.Println(err)
	// Output:
	// [18446744073709551615 "pen" 3] <nil>
	// [18446744073709551615,"pen",3.0]
	// element 3 (price): expected double, got string "cheap"
}

// fuzzFormat builds a format from a fuzzed spec list, or a fixed one.
func fuzzFormat(specs string) Format {
	var f Format
	for s := range strings.SplitSeq(specs, ",") {
		fd, err := ParseField(s)
		if err != nil {
			break
		}
		f = append(f, fd)
	}
	if f.Validate() != nil {
		f = Format{{Name: "id", Type: TypeUnsigned}, {Name: "d", Type: TypeDouble, Nullable: true}, {Name: "b", Type: TypeBytes, Nullable: true}}
	}
	return f
}

func FuzzParseJSONTuple(f *testing.F) {
	f.Add([]byte(`[1, -2, 9.5, "n", true, "AQI=", "123e4567-e89b-12d3-a456-426614174000", null]`),
		"id:unsigned,delta:integer,price:double,name:string,ok:boolean,blob:bytes,ref:uuid,note:string?")
	f.Add([]byte(`[1, "NaN", "AQI="]`), "")
	f.Add([]byte(`[1, 1e308, null, 1.5e-7, "x", false, null, -0, 12345678901234567890]`), "")
	f.Add([]byte(`[1, [2], {"a": 3}]`), "")
	f.Add([]byte(` [ "\u00e9\ud800" , 1E+2 ] `), "s:string,d:double")
	f.Add([]byte(`["bad\udc00surrogate", "\ud83d\ude00", "\\ud800"]`), "s:string")
	f.Add([]byte("[\"bad\xff\xfe\", \"\xef\xbf\xbd\"]"), "")
	f.Fuzz(func(t *testing.T, data []byte, specs string) {
		format := fuzzFormat(specs)
		tup, err := ParseJSONTuple(data, format)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("ParseJSONTuple accepted invalid JSON %q", data)
		}
		if err := format.Check(tup); err != nil {
			t.Fatalf("ParseJSONTuple(%q) = %v, which Check refuses: %v", data, tup, err)
		}
		out := AppendJSON(nil, tup)
		again, err := ParseJSONTuple(out, format)
		if err != nil || !again.Equal(tup) {
			t.Fatalf("%q parsed as %v, written as %s, read back as %v, %v", data, tup, out, again, err)
		}
	})
}

func FuzzParseJSONKey(f *testing.F) {
	f.Add([]byte(`[7, 2]`), "id:unsigned,at:double")
	f.Add([]byte(`[7, "NaN"]`), "id:unsigned,at:double")
	f.Add([]byte(`["x", null]`), "s:string,u:uuid?")
	f.Add([]byte(`[1]`), "")
	f.Add([]byte(`["\udc00", "\ud83d\ude00"]`), "s:string,t:string")
	f.Add([]byte(`["`+strings.Repeat("k", MaxKeyBytes)+`"]`), "s:string")
	f.Fuzz(func(t *testing.T, data []byte, specs string) {
		parts := fuzzFormat(specs)
		key, err := ParseJSONKey(data, parts)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if len(key) != len(parts) {
			t.Fatalf("ParseJSONKey(%q) = %v for %d parts", data, key, len(parts))
		}
		enc, err := AppendKey(nil, key...)
		if err != nil {
			t.Fatalf("a parsed key %v does not encode: %v", key, err)
		}
		if len(enc) > MaxKeyBytes {
			t.Fatalf("ParseJSONKey took a key of %d bytes", len(enc))
		}
		back, err := DecodeKey(enc)
		if err != nil || !Tuple(back).Equal(key) {
			t.Fatalf("key %v round trip: %v, %v", key, back, err)
		}
		again, err := ParseJSONKey(AppendJSON(nil, key), parts)
		if err != nil || !Tuple(again).Equal(key) {
			t.Fatalf("key %v written as JSON read back as %v, %v", key, again, err)
		}
	})
}

func TestParseJSONArgs(t *testing.T) {
	t.Parallel()
	got, err := ParseJSONArgs([]byte(`[1, -2, "x", 2.5, true, null]`))
	if want := (Tuple{Uint(1), Int(-2), String("x"), Double(2.5), Bool(true), Null()}); err != nil || !got.Equal(want) {
		t.Errorf("ParseJSONArgs = %v, %v; want %v", got, err, want)
	}
	for in, want := range map[string]string{
		`[1,`:                 "the argument list is not valid JSON: unexpected end of JSON input",
		`{"a": 1}`:            "the argument list must be a JSON array, got an object",
		`[1, [2]]`:            "argument 2: got an array",
		`["ok", "bad\udc00"]`: `argument 2: the string has \udc00 at offset 3`,
	} {
		if _, err := ParseJSONArgs([]byte(in)); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseJSONArgs(%s): %v; want it to start %q", in, err, want)
		}
	}
}
