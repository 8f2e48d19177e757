package tuple

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// The key encoding is frozen: these bytes must never change.
func TestAppendKeyGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    Value
		want string
	}{
		{Null(), "01"},
		{Bool(false), "02"},
		{Bool(true), "03"},
		{Int(-1), "04ffffffffffffffff"},
		{Int(math.MinInt64), "048000000000000000"},
		{Int(5), "050000000000000005"},
		{Uint(5), "050000000000000005"},
		{Uint(math.MaxUint64), "05ffffffffffffffff"},
		{Double(0), "068000000000000000"},
		{Double(math.Copysign(0, -1)), "068000000000000000"},
		{Double(1), "06bff0000000000000"},
		{Double(-1), "06400fffffffffffff"},
		{Double(math.Inf(1)), "06fff0000000000000"},
		{Double(math.Inf(-1)), "06000fffffffffffff"},
		{String(""), "070001"},
		{String("ab"), "0761620001"},
		{String("a\x00b"), "076100ff620001"},
		{Bytes([]byte{0, 0}), "0800ff00ff0001"},
		{UUID([16]byte{0: 0x12, 15: 0x34}), "0912000000000000000000000000000034"},
	} {
		got, err := AppendKey(nil, c.v)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got) != c.want {
			t.Errorf("AppendKey(%v %v) = %x, want %s", c.v.Kind(), c.v, got, c.want)
		}
	}
	got, err := AppendKey([]byte("d/"), Uint(1), String("x"))
	if err != nil || string(got) != "d/\x05\x00\x00\x00\x00\x00\x00\x00\x01\x07x\x00\x01" {
		t.Errorf("AppendKey with a prefix = %q, %v", got, err)
	}
}

func TestAppendKeyPreservesOrder(t *testing.T) {
	t.Parallel()
	var vs []Value // all but NaN
	for _, v := range ordered() {
		if !isNaN(v) {
			vs = append(vs, v)
		}
	}
	var keys [][]Value
	for _, a := range vs {
		keys = append(keys, []Value{a})
		for _, b := range vs[:10] {
			keys = append(keys, []Value{a, b})
		}
	}
	keys = append(keys, nil)
	enc := make([][]byte, len(keys))
	for i, k := range keys {
		var err error
		if enc[i], err = AppendKey(nil, k...); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		for j := range keys {
			want := CompareKeys(keys[i], keys[j])
			if got := bytes.Compare(enc[i], enc[j]); got != want {
				t.Fatalf("keys %v and %v: bytes compare %d, values %d (%x, %x)", keys[i], keys[j], got, want, enc[i], enc[j])
			}
		}
	}
}

func isNaN(v Value) bool { return v.Kind() == KindDouble && v.num == canonicalNaN }

func TestKeyRoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range ordered() {
		if isNaN(v) {
			continue
		}
		key := []Value{v, String("tail")}
		enc, err := AppendKey(nil, key...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeKey(enc)
		if err != nil {
			t.Fatalf("DecodeKey(%x): %v", enc, err)
		}
		if CompareKeys(got, key) != 0 || !Tuple(got).Equal(key) {
			t.Errorf("DecodeKey(AppendKey(%v)) = %v", key, got)
		}
	}
	if got, err := DecodeKey(nil); err != nil || len(got) != 0 {
		t.Errorf("DecodeKey(nil) = %v, %v", got, err)
	}
	full := make([]Value, MaxKeyParts)
	enc, err := AppendKey(nil, full...)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeKey(enc); err != nil || len(got) != MaxKeyParts {
		t.Errorf("a key of MaxKeyParts: %v, %v", got, err)
	}
}

func TestAppendKeyRefusals(t *testing.T) {
	t.Parallel()
	dst := []byte("prefix")
	got, err := AppendKey(dst, Uint(1), Double(math.NaN()))
	var e *Error
	if !errors.Is(err, ErrNaN) || !errors.As(err, &e) || e.Field != 2 || !strings.Contains(err.Error(), "key part 2: NaN") {
		t.Errorf("AppendKey with NaN: %v", err)
	}
	if string(got) != "prefix" {
		t.Errorf("AppendKey changed dst on failure: %q", got)
	}
	_, err = AppendKey(nil, make([]Value, MaxKeyParts+1)...)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "17 parts; at most 16") {
		t.Errorf("AppendKey with 17 parts: %v", err)
	}
}

func TestDecodeKeyRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		hex, want string
	}{
		{"00", "key part 1: unknown tag 0x00 at byte 0"},
		{"010a", "key part 2: unknown tag 0x0a at byte 1"},
		{"0500", "key part 1: truncated non-negative integer"},
		{"0400000000000000ff", "non-negative number 255 under the negative integer tag"},
		{"06", "truncated double"},
		{"067fffffffffffffff", "NaN or -0"},    // -0
		{"06fff8000000000000", "NaN or -0"},    // NaN
		{"06000800000000000f", "NaN or -0"},    // a negative NaN
		{"0761", "string without a valid end"}, // no terminator
		{"076100", "string without a valid end"},
		{"07610002", "bad escape"},
		{"0800", "bytes without a valid end"},
		{"09000102", "truncated uuid"},
		{strings.Repeat("01", MaxKeyParts+1), "more than 16 parts"},
	} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeKey(b)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeKey(%s) = %v, %v; want an error containing %q", c.hex, got, err, c.want)
			continue
		}
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrLimit) {
			t.Errorf("DecodeKey(%s): %v is neither malformed nor a limit", c.hex, err)
		}
	}
}

func FuzzKeyOrder(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add([]byte{2, 0, 3, 0}, []byte{3, 0})
	f.Add([]byte{6, 3, 'a', 0, 'b'}, []byte{6, 2, 'a', 0})
	f.Add([]byte{4, 2, 4, 1}, []byte{5, 9})
	f.Add([]byte{9, 1, 9, 9}, []byte{9, 1, 9, 10})
	f.Add([]byte{7, 2, 0, 0}, []byte{7, 1, 0})
	f.Add([]byte{2, 7, 1, 2, 3, 4, 5, 6, 7, 8}, []byte{3, 7, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, da, db []byte) {
		a, b := genValues(da, MaxKeyParts, false), genValues(db, MaxKeyParts, false)
		ea, err := AppendKey(nil, a...)
		if err != nil {
			t.Fatal(err)
		}
		eb, err := AppendKey(nil, b...)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := bytes.Compare(ea, eb), CompareKeys(a, b); got != want {
			t.Fatalf("keys %v and %v: bytes compare %d, values %d", a, b, got, want)
		}
		if CompareKeys(a, b) != -CompareKeys(b, a) {
			t.Fatalf("CompareKeys is not antisymmetric on %v, %v", a, b)
		}
		back, err := DecodeKey(ea)
		if err != nil {
			t.Fatalf("DecodeKey(%x): %v", ea, err)
		}
		if !Tuple(back).Equal(a) {
			t.Fatalf("DecodeKey(AppendKey(%v)) = %v", a, back)
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	for _, v := range ordered() {
		if k, err := AppendKey(nil, v, String("x\x00")); err == nil {
			f.Add(k)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x07, 0x00})
	f.Add([]byte{0x04, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0x06, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		key, err := DecodeKey(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("DecodeKey error %v is not an *Error", err)
			}
			return
		}
		again, err := AppendKey(nil, key...)
		if err != nil {
			t.Fatalf("AppendKey of a decoded key %v: %v", key, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("DecodeKey(%x) = %v, which encodes as %x: not canonical", b, key, again)
		}
	})
}

func ExampleAppendKey() {
	// A key of a user id and an order name: its bytes sort as the keys do.
	a, _ := AppendKey(nil, Uint(7), String("a\x00b"))
	b, _ := AppendKey(nil, Uint(7), String("ab"))
	fmt.Printf("%x\n%x\n%d\n", a, b, bytes.Compare(a, b))

	key, _ := DecodeKey(a)
	fmt.Println(key)

	_, err := AppendKey(nil, Double(math.NaN()))
	fmt.Println(err)
	// Output:
	// 050000000000000007076100ff620001
	// 0500000000000000070761620001
	// -1
	// [7 "a\x00b"]
	// key part 1: NaN cannot be part of a key
}

func TestEncodeKeyRefusesMoreThanMaxKeyBytes(t *testing.T) {
	t.Parallel()
	// A string takes its bytes, a tag and a two-byte terminator.
	at := String(strings.Repeat("x", MaxKeyBytes-3))
	if kb, err := EncodeKey(Uint(1), at); err == nil || !errors.Is(err, ErrLimit) || err.Error() != "a key of 4105 bytes is more than 4096" {
		t.Errorf("EncodeKey of 4105 bytes = %d bytes, %v; want ErrLimit naming both sizes", len(kb), err)
	}
	kb, err := EncodeKey(at)
	if err != nil || len(kb) != MaxKeyBytes {
		t.Errorf("EncodeKey of exactly MaxKeyBytes = %d bytes, %v", len(kb), err)
	}
	if want, _ := AppendKey(nil, at); !bytes.Equal(kb, want) {
		t.Errorf("EncodeKey = %x, AppendKey %x", kb, want)
	}
	if _, err := EncodeKey(Double(math.NaN())); !errors.Is(err, ErrNaN) {
		t.Errorf("EncodeKey(NaN): %v, want ErrNaN", err)
	}
	// ParseJSONKey refuses the same key with the same message.
	parts := Format{{Name: "id", Type: TypeString}}
	if _, err := ParseJSONKey([]byte(`["`+strings.Repeat("x", 5000)+`"]`), parts); !errors.Is(err, ErrLimit) || err.Error() != "a key of 5003 bytes is more than 4096" {
		t.Errorf("ParseJSONKey of a 5000-byte string: %v", err)
	}
	if _, err := ParseJSONKey([]byte(`["`+strings.Repeat("x", MaxKeyBytes-3)+`"]`), parts); err != nil {
		t.Errorf("ParseJSONKey of a key of MaxKeyBytes: %v", err)
	}
}
