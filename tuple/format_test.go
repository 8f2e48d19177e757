package tuple

import (
	"errors"
	"strings"
	"testing"
)

func TestParseField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		spec string
		want Field
	}{
		{"id:unsigned", Field{Name: "id", Type: TypeUnsigned}},
		{"price:double?", Field{Name: "price", Type: TypeDouble, Nullable: true}},
		{"_x9:uuid", Field{Name: "_x9", Type: TypeUUID}},
		{strings.Repeat("a", 64) + ":bytes", Field{Name: strings.Repeat("a", 64), Type: TypeBytes}},
	} {
		got, err := ParseField(c.spec)
		if err != nil || got != c.want {
			t.Errorf("ParseField(%q) = %+v, %v; want %+v", c.spec, got, err, c.want)
		}
		if got.String() != c.spec {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), c.spec)
		}
	}
	for _, c := range []struct{ spec, want string }{
		{"id", "has no ':'"},
		{":unsigned", "the name is empty"},
		{"9id:unsigned", "starts with a digit"},
		{"my-id:unsigned", `has "-"`},
		{"naïve:string", "ASCII letters"},
		{strings.Repeat("a", 65) + ":bytes", "longer than 64 bytes"},
		{"id:int", `unknown type "int"`},
		{"id:unsigned??", `unknown type "unsigned?"`},
		{"id:", `unknown type ""`},
		{"id:string:x", `unknown type "string:x"`},
	} {
		_, err := ParseField(c.spec)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseField(%q) = %v; want a syntax error containing %q", c.spec, err, c.want)
		}
	}
}

func mustFormat(tb testing.TB, specs ...string) Format {
	tb.Helper()
	var f Format
	for _, s := range specs {
		fd, err := ParseField(s)
		if err != nil {
			tb.Fatal(err)
		}
		f = append(f, fd)
	}
	if err := f.Validate(); err != nil {
		tb.Fatal(err)
	}
	return f
}

func TestFormatValidate(t *testing.T) {
	t.Parallel()
	f := mustFormat(t, "id:unsigned", "name:string", "price:double?")
	if i, ok := f.Index("price"); !ok || i != 2 {
		t.Errorf("Index(price) = %d, %v", i, ok)
	}
	if i, ok := f.Index("nope"); ok || i != -1 {
		t.Errorf("Index(nope) = %d, %v", i, ok)
	}
	for _, c := range []struct {
		f     Format
		want  string
		class error
	}{
		{nil, "no fields", ErrFormat},
		{make(Format, MaxFields+1), "1001 fields; at most 1000", ErrLimit},
		{Format{{Name: "a", Type: TypeString}, {Name: "", Type: TypeString}}, "field 2: the name is empty", ErrFormat},
		{Format{{Name: "a b", Type: TypeString}}, `field 1: the name "a b" has " "`, ErrFormat},
		{Format{{Name: "a", Type: 0}}, "field 1 (a): invalid type Type(0)", ErrFormat},
		{Format{{Name: "a", Type: 99}}, "invalid type Type(99)", ErrFormat},
		{Format{{Name: "a", Type: TypeString}, {Name: "b", Type: TypeString}, {Name: "a", Type: TypeUUID}}, "field 3 (a): the name is already field 1's", ErrFormat},
	} {
		err := c.f.Validate()
		if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%v) = %v; want %v containing %q", c.f, err, c.class, c.want)
		}
	}
}

func TestFormatCheck(t *testing.T) {
	t.Parallel()
	u := UUID([16]byte{1})
	f := mustFormat(t, "id:unsigned", "delta:integer", "price:double", "name:string", "ok:boolean", "blob:bytes", "ref:uuid", "note:string?", "extra:integer?")
	good := Tuple{Uint(1), Int(-3), Double(1.5), String("x"), Bool(true), Bytes([]byte{1}), u, Null(), Int(7)}
	if err := f.Check(good); err != nil {
		t.Errorf("Check(%v): %v", good, err)
	}
	for _, ok := range []Tuple{
		good[:7], // missing trailing nullable fields
		good[:8],
		append(good[:9:9], String("beyond"), Null(), Double(0)), // anything beyond the format
		{Uint(1), Uint(3), Double(0), String(""), Bool(false), Bytes(nil), u, String("n"), Null()},
	} {
		if err := f.Check(ok); err != nil {
			t.Errorf("Check(%v): %v", ok, err)
		}
	}
	with := func(i int, v Value) Tuple {
		tup := append(Tuple(nil), good...)
		tup[i] = v
		return tup
	}
	for _, c := range []struct {
		t         Tuple
		want      string
		field     int
		fieldName string
	}{
		{with(0, Int(-1)), "field 1 (id): expected unsigned, got integer -1", 1, "id"},
		{with(0, Double(1)), "field 1 (id): expected unsigned, got double 1", 1, "id"},
		{with(1, Double(1)), "field 2 (delta): expected integer, got double 1", 2, "delta"},
		{with(2, String("x")), `field 3 (price): expected double, got string "x"`, 3, "price"},
		{with(2, Uint(2)), "field 3 (price): expected double, got unsigned 2", 3, "price"},
		{with(3, Bytes([]byte("x"))), "field 4 (name): expected string, got bytes x'78'", 4, "name"},
		{with(4, Uint(1)), "field 5 (ok): expected boolean, got unsigned 1", 5, "ok"},
		{with(5, String("x")), "field 6 (blob): expected bytes, got string", 6, "blob"},
		{with(6, String("x")), "field 7 (ref): expected uuid, got string", 7, "ref"},
		{with(7, Uint(1)), "field 8 (note): expected string, got unsigned 1", 8, "note"},
		{with(0, Null()), "field 1 (id): expected unsigned, got null", 1, "id"},
		{good[:6], "field 7 (ref): missing: the tuple has 6 fields and this one is not nullable", 7, "ref"},
		{nil, "field 1 (id): missing", 1, "id"},
		{with(3, String("bad\xff\xfe")), "field 4 (name): the string is not valid UTF-8: byte 0xff at offset 3 (a string holds text; store bytes in a bytes field)", 4, "name"},
		{with(7, String("\xed\xb0\x80")), "field 8 (note): the string is not valid UTF-8: byte 0xed at offset 0", 8, "note"}, // an encoded surrogate
		{append(good[:9:9], Null(), String("ok\xc3")), "field 11: the string is not valid UTF-8: byte 0xc3 at offset 2", 11, ""},
	} {
		err := f.Check(c.t)
		var e *Error
		if !errors.Is(err, ErrMismatch) || !errors.As(err, &e) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%v) = %v; want a mismatch containing %q", c.t, err, c.want)
			continue
		}
		if e.Field != c.field || e.Name != c.fieldName {
			t.Errorf("Check(%v): error names field %d (%s), want %d (%s)", c.t, e.Field, e.Name, c.field, c.fieldName)
		}
	}
	if err := f.Check(make(Tuple, MaxFields+1)); !errors.Is(err, ErrLimit) {
		t.Errorf("Check of 1001 fields: %v", err)
	}
}

func FuzzParseField(f *testing.F) {
	for _, s := range []string{"id:unsigned", "x:double?", "_:uuid", "a:", ":b", "a:b:c", "a?:string", "é:string"} {
		f.Add(s, "name:string")
	}
	f.Fuzz(func(t *testing.T, s1, s2 string) {
		var format Format
		for _, s := range []string{s1, s2} {
			fd, err := ParseField(s)
			if err != nil {
				if !errors.Is(err, ErrSyntax) {
					t.Fatalf("ParseField(%q): %v is not a syntax error", s, err)
				}
				continue
			}
			again, err := ParseField(fd.String())
			if err != nil || again != fd {
				t.Fatalf("ParseField(%q) = %+v, whose String %q parses as %+v, %v", s, fd, fd.String(), again, err)
			}
			format = append(format, fd)
		}
		err := format.Validate()
		switch {
		case len(format) == 0:
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("an empty format validated: %v", err)
			}
		case len(format) == 2 && format[0].Name == format[1].Name:
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "already") {
				t.Fatalf("a duplicate name validated: %v", err)
			}
		case err != nil:
			t.Fatalf("fields ParseField accepted do not validate: %v", err)
		}
	})
}

func TestFormatCheckField(t *testing.T) {
	t.Parallel()
	f := mustFormat(t, "id:unsigned", "note:string?")
	for _, c := range []struct {
		i    int
		v    Value
		want string // "" : accepted
	}{
		{0, Uint(3), ""},
		{1, Null(), ""},
		{1, String("x"), ""},
		{0, Int(-1), "field 1 (id): expected unsigned, got integer -1"},
		{0, Null(), "field 1 (id): expected unsigned, got null"},
		{1, String("\xff"), "field 2 (note): the string is not valid UTF-8"},
		{2, Uint(1), "field 3 is not in the format of 2 fields"},
		{-1, Uint(1), "field 0 is not in the format of 2 fields"},
	} {
		err := f.CheckField(c.i, c.v)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("CheckField(%d, %v) = %v, want nil", c.i, c.v, err)
		case c.want != "" && (!errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("CheckField(%d, %v) = %v, want ErrMismatch containing %q", c.i, c.v, err, c.want)
		}
	}
}
