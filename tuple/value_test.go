package tuple

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestTypeParseAndString(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"unsigned", "integer", "double", "string", "boolean", "bytes", "uuid"} {
		typ, err := ParseType(name)
		if err != nil {
			t.Fatalf("ParseType(%q): %v", name, err)
		}
		if !typ.Valid() || typ.String() != name {
			t.Errorf("ParseType(%q) = %v (valid %v)", name, typ, typ.Valid())
		}
	}
	for _, bad := range []string{"", "Unsigned", "int", "any", "number", "uuid "} {
		_, err := ParseType(bad)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "unknown type") {
			t.Errorf("ParseType(%q) = %v, want an unknown-type syntax error", bad, err)
		}
	}
	if got := Type(0).String(); got != "Type(0)" {
		t.Errorf("Type(0).String() = %q", got)
	}
	if Type(0).Valid() || Type(8).Valid() {
		t.Error("Type 0 or 8 reported valid")
	}
}

func TestConstructorsAndAccessors(t *testing.T) {
	t.Parallel()
	if v := Int(5); v.Kind() != KindUint || v != Uint(5) {
		t.Errorf("Int(5) = %v of kind %v, want the same value as Uint(5)", v, v.Kind())
	}
	if v := Int(-5); v.Kind() != KindInt {
		t.Errorf("Int(-5) has kind %v", v.Kind())
	}
	if n, ok := Int(-5).AsInt(); !ok || n != -5 {
		t.Errorf("Int(-5).AsInt() = %d, %v", n, ok)
	}
	if n, ok := Uint(7).AsInt(); !ok || n != 7 {
		t.Errorf("Uint(7).AsInt() = %d, %v", n, ok)
	}
	if _, ok := Uint(math.MaxUint64).AsInt(); ok {
		t.Error("Uint(MaxUint64).AsInt() ok")
	}
	if _, ok := Int(-1).AsUint(); ok {
		t.Error("Int(-1).AsUint() ok")
	}
	if n, ok := Uint(math.MaxUint64).AsUint(); !ok || n != math.MaxUint64 {
		t.Errorf("AsUint = %d, %v", n, ok)
	}
	if _, ok := Uint(1).AsDouble(); ok {
		t.Error("Uint(1).AsDouble() ok: doubles only")
	}
	if f, ok := Double(1.5).AsDouble(); !ok || f != 1.5 {
		t.Errorf("Double(1.5).AsDouble() = %v, %v", f, ok)
	}
	negZero := math.Copysign(0, -1)
	if v := Double(negZero); v != Double(0) {
		t.Errorf("Double(-0) = %#v, want +0", v)
	}
	nan1, nan2 := math.NaN(), math.Float64frombits(0x7ff0000000000042)
	if Double(nan1) != Double(nan2) || !Double(nan1).Equal(Double(nan2)) {
		t.Error("two NaNs are different values")
	}
	if b, ok := Bool(true).AsBool(); !ok || !b {
		t.Error("Bool(true).AsBool()")
	}
	if b, ok := Bool(false).AsBool(); !ok || b {
		t.Error("Bool(false).AsBool()")
	}
	if _, ok := Uint(1).AsBool(); ok {
		t.Error("Uint(1).AsBool() ok")
	}
	if s, ok := String("héllo").AsString(); !ok || s != "héllo" {
		t.Errorf("AsString = %q, %v", s, ok)
	}
	if _, ok := Bytes([]byte("x")).AsString(); ok {
		t.Error("bytes read as a string")
	}
	raw := []byte{1, 0, 2}
	v := Bytes(raw)
	raw[0] = 9
	got, ok := v.AsBytes()
	if !ok || !slices.Equal(got, []byte{1, 0, 2}) {
		t.Errorf("Bytes did not copy: %v", got)
	}
	got[1] = 9
	if again, _ := v.AsBytes(); again[1] != 0 {
		t.Error("AsBytes shares the value's memory")
	}
	if String("x") == Bytes([]byte("x")) {
		t.Error("a string equals bytes of the same content")
	}
	u := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	if got, ok := UUID(u).AsUUID(); !ok || got != u {
		t.Errorf("AsUUID = %x, %v", got, ok)
	}
	if !Null().IsNull() || (Value{}) != Null() || Uint(0).IsNull() {
		t.Error("null")
	}
}

func TestParseUUID(t *testing.T) {
	t.Parallel()
	v, err := ParseUUID("123E4567-e89b-12d3-a456-426614174000")
	if err != nil {
		t.Fatal(err)
	}
	if got := v.String(); got != "123e4567-e89b-12d3-a456-426614174000" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{
		"", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
		"123e4567-e89b-12d3-a456-4266141740000", "123e4567-e89b-12d3-a456_426614174000",
		"g23e4567-e89b-12d3-a456-426614174000", "{123e4567-e89b-12d3-a456-42661417400}",
	} {
		_, err := ParseUUID(bad)
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "8-4-4-4-12") {
			t.Errorf("ParseUUID(%q) = %v", bad, err)
		}
	}
}

func TestValueString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    Value
		want string
	}{
		{Null(), "null"},
		{Bool(true), "true"},
		{Int(-5), "-5"},
		{Uint(math.MaxUint64), "18446744073709551615"},
		{Double(1.5), "1.5"},
		{Double(math.NaN()), "NaN"},
		{Double(math.Inf(-1)), "-Inf"},
		{String("a\"b"), `"a\"b"`},
		{Bytes([]byte{0x0a, 0xff}), "x'0aff'"},
	} {
		if got := c.v.String(); got != c.want {
			t.Errorf("%#v.String() = %q, want %q", c.v, got, c.want)
		}
	}
	for k := KindNull; k <= KindUUID; k++ {
		if strings.HasPrefix(k.String(), "Kind(") {
			t.Errorf("kind %d has no name", k)
		}
	}
	if got := Kind(42).String(); got != "Kind(42)" {
		t.Errorf("Kind(42).String() = %q", got)
	}
}

// ordered lists values in strictly increasing Compare order.
func ordered() []Value {
	return []Value{
		Null(),
		Bool(false),
		Bool(true),
		Int(math.MinInt64),
		Int(-1 << 40),
		Int(-2),
		Int(-1),
		Uint(0),
		Uint(1),
		Uint(255),
		Uint(256),
		Uint(math.MaxInt64),
		Uint(1 << 63),
		Uint(math.MaxUint64),
		Double(math.Inf(-1)),
		Double(-math.MaxFloat64),
		Double(-1),
		Double(-math.SmallestNonzeroFloat64),
		Double(0),
		Double(math.SmallestNonzeroFloat64),
		Double(1),
		Double(math.MaxFloat64),
		Double(math.Inf(1)),
		Double(math.NaN()),
		String(""),
		String("\x00"),
		String("\x00\x00"),
		String("\x00\x01"),
		String("\x00\xff"),
		String("\x01"),
		String("a"),
		String("a\x00"),
		String("a\x00b"),
		String("a\x01"),
		String("ab"),
		String("b"),
		String("\xff"),
		String("\xff\xff"),
		Bytes(nil),
		Bytes([]byte{0}),
		Bytes([]byte{0, 0}),
		Bytes([]byte{1}),
		Bytes([]byte{0xff}),
		UUID([16]byte{}),
		UUID([16]byte{15: 1}),
		UUID([16]byte{0: 1}),
		UUID([16]byte{0: 0xff, 15: 0xff}),
	}
}

func TestCompareIsATotalOrder(t *testing.T) {
	t.Parallel()
	vs := ordered()
	for i, a := range vs {
		for j, b := range vs {
			want := cmpOrdered(int64(i), int64(j))
			if got := Compare(a, b); got != want {
				t.Errorf("Compare(%v %v, %v %v) = %d, want %d", a.Kind(), a, b.Kind(), b, got, want)
			}
			if got := a.Equal(b); got != (i == j) {
				t.Errorf("%v.Equal(%v) = %v", a, b, got)
			}
		}
	}
}

func TestCompareKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b []Value
		want int
	}{
		{nil, nil, 0},
		{nil, []Value{Null()}, -1},
		{[]Value{Uint(1)}, []Value{Uint(1), Null()}, -1},
		{[]Value{Uint(1), String("b")}, []Value{Uint(1), String("a"), Uint(9)}, 1},
		{[]Value{Int(5)}, []Value{Uint(5)}, 0},
		{[]Value{Uint(2)}, []Value{Uint(10)}, -1},
	} {
		if got := CompareKeys(c.a, c.b); got != c.want {
			t.Errorf("CompareKeys(%v, %v) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := CompareKeys(c.b, c.a); got != -c.want {
			t.Errorf("CompareKeys(%v, %v) = %d, want %d", c.b, c.a, got, -c.want)
		}
	}
	if !(Tuple{Uint(1), String("x")}).Equal(Tuple{Int(1), String("x")}) || (Tuple{Uint(1)}).Equal(Tuple{Uint(1), Null()}) {
		t.Error("Tuple.Equal")
	}
}

func TestErrorCarriesItsClassAndPlace(t *testing.T) {
	t.Parallel()
	err := fieldError(ErrMismatch, "field", 3, "price", "expected double, got %s", describe(String("x")))
	if got, want := err.Error(), `field 3 (price): expected double, got string "x"`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	var e *Error
	if !errors.As(error(err), &e) || e.Field != 3 || e.Name != "price" || !errors.Is(err, ErrMismatch) || errors.Is(err, ErrOp) {
		t.Errorf("error %#v", err)
	}
	if got := ErrMismatch.Error(); !strings.HasPrefix(got, "tuple: ") {
		t.Errorf("class text %q", got)
	}
	long := describe(String(strings.Repeat("a", 1000)))
	if len(long) > 100 || !strings.HasSuffix(long, `..."`) {
		t.Errorf("describe did not shorten: %q", long)
	}
}
