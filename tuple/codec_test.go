package tuple

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"strings"
	"testing"
)

// The tuple encoding is frozen: these bytes must never change.
func TestAppendTupleGolden(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		t    Tuple
		want string
	}{
		{nil, "00"},
		{Tuple{Null(), Bool(false), Bool(true)}, "03010203"},
		{Tuple{Int(-1), Int(-129), Int(math.MinInt64)}, "03" + "0400" + "048001" + "04ffffffffffffffff7f"},
		{Tuple{Uint(0), Uint(300), Uint(math.MaxUint64)}, "03" + "0500" + "05ac02" + "05ffffffffffffffffff01"},
		{Tuple{Double(1), Double(math.NaN()), Double(math.Copysign(0, -1))}, "03" + "06000000000000f03f" + "06000000000000f87f" + "060000000000000000"},
		{Tuple{String(""), String("ab"), Bytes([]byte{0, 1})}, "03" + "0700" + "07026162" + "08020001"},
		{Tuple{UUID([16]byte{0: 0xab, 15: 0xcd})}, "01" + "09ab0000000000000000000000000000cd"},
	} {
		got := AppendTuple(nil, c.t)
		if hex.EncodeToString(got) != c.want {
			t.Errorf("AppendTuple(%v) = %x, want %s", c.t, got, c.want)
		}
		back, err := DecodeTuple(got)
		if err != nil || !back.Equal(c.t) {
			t.Errorf("DecodeTuple(%x) = %v, %v; want %v", got, back, err, c.t)
		}
	}
	if got := AppendTuple([]byte("v"), Tuple{Null()}); string(got) != "v\x01\x01" {
		t.Errorf("AppendTuple did not append: %q", got)
	}
}

func TestDecodeTupleRefusals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		hex, want string
		class     error
	}{
		{"", "field count: truncated varint", ErrMalformed},
		{"80", "field count: truncated varint", ErrMalformed},
		{"8000", "not in its shortest form", ErrMalformed},
		{"ffffffffffffffffff02", "overflows 64 bits", ErrMalformed},
		{"e907", "1001 fields; at most 1000", ErrLimit},
		{"05010101", "claims 5 fields but only 3 bytes follow", ErrMalformed},
		{"0101" + "00", "1 bytes after the last field, at byte 2", ErrMalformed},
		{"0100", "field 1: unknown tag 0x00 at byte 1", ErrMalformed},
		{"020a01", "field 1: unknown tag 0x0a", ErrMalformed},
		{"020105", "field 2: non-negative integer: truncated varint at byte 2", ErrMalformed},
		{"01058000", "shortest form", ErrMalformed},
		{"010480808080808080808001", "below the int64 range", ErrMalformed},
		{"010600", "truncated double", ErrMalformed},
		{"01060000000000000080", "not canonical", ErrMalformed},
		{"0106010000000000f87f", "not canonical", ErrMalformed},
		{"010705616263", "string of 5 bytes but only 3 follow", ErrMalformed},
		{"0108ffffffffffffffff7f", "bytes of 9223372036854775807 bytes but only 0 follow", ErrMalformed},
		{"010900", "truncated uuid", ErrMalformed},
	} {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTuple(b)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.class) {
			t.Errorf("DecodeTuple(%s) = %v, %v; want %v containing %q", c.hex, got, err, c.class, c.want)
		}
	}
}

func TestDecodeField(t *testing.T) {
	t.Parallel()
	tup := Tuple{Uint(7), String("name"), Bytes([]byte("blob")), Double(2.5), Null()}
	b := AppendTuple(nil, tup)
	for i, want := range tup {
		got, err := DecodeField(b, i)
		if err != nil || got != want {
			t.Errorf("DecodeField(%d) = %v, %v; want %v", i, got, err, want)
		}
	}
	if got, err := DecodeField(b, len(tup)); err != nil || !got.IsNull() {
		t.Errorf("DecodeField beyond the tuple = %v, %v; want null", got, err)
	}
	if _, err := DecodeField(b, -1); !errors.Is(err, ErrMismatch) {
		t.Errorf("DecodeField(-1): %v", err)
	}
	bad := append(AppendTuple(nil, Tuple{Uint(1), String("x")})[:3], 0x07, 0x09) // field 2 claims 9 bytes
	bad[0] = 3
	if _, err := DecodeField(bad, 1); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "field 2") {
		t.Errorf("DecodeField on a bad field 2: %v", err)
	}
	if _, err := DecodeField(bad, 2); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "field 2") {
		t.Errorf("DecodeField past a bad field 2: %v", err)
	}
	if _, err := DecodeField([]byte{0x80}, 0); !errors.Is(err, ErrMalformed) {
		t.Errorf("DecodeField on a bad count: %v", err)
	}
}

func TestDecodeTupleSharesOneCopy(t *testing.T) {
	t.Parallel()
	b := AppendTuple(nil, Tuple{String("abc"), Bytes([]byte("def"))})
	tup, err := DecodeTuple(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if s, _ := tup[0].AsString(); s != "abc" {
		t.Errorf("the decoded string changed with the input: %q", s)
	}
}

func FuzzTupleRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{2, 2, 3, 3, 4, 0x55, 6, 5, 'h', 'e', 'l', 'l', 'o'})
	f.Fuzz(func(t *testing.T, data []byte) {
		tup := Tuple(genValues(data, MaxFields, true))
		b := AppendTuple(nil, tup)
		back, err := DecodeTuple(b)
		if err != nil {
			t.Fatalf("DecodeTuple(AppendTuple(%v)): %v", tup, err)
		}
		if !back.Equal(tup) {
			t.Fatalf("DecodeTuple(AppendTuple(%v)) = %v", tup, back)
		}
		for i := range min(len(tup), 32) {
			v, err := DecodeField(b, i)
			if err != nil || v != tup[i] {
				t.Fatalf("DecodeField(%d) = %v, %v; want %v", i, v, err, tup[i])
			}
		}
	})
}

func FuzzDecodeTuple(f *testing.F) {
	f.Add([]byte{0})
	f.Add(AppendTuple(nil, Tuple{Uint(1), String("x"), Double(math.NaN()), Int(-9), Bytes([]byte{0}), UUID([16]byte{1})}))
	f.Add([]byte{0x01, 0x07, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0xe8, 0x07})
	f.Add([]byte{0x02, 0x05, 0x80, 0x80, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		tup, err := DecodeTuple(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		if again := AppendTuple(nil, tup); !bytes.Equal(again, b) {
			t.Fatalf("DecodeTuple(%x) = %v, which encodes as %x: not canonical", b, tup, again)
		}
		for i := range tup {
			v, err := DecodeField(b, i)
			if err != nil || v != tup[i] {
				t.Fatalf("DecodeField(%d) = %v, %v; want %v", i, v, err, tup[i])
			}
		}
	})
}

// benchTuple is a typical stored tuple: a uint key and a 100-byte value.
func benchTuple() Tuple {
	return Tuple{Uint(123456789), Bytes(bytes.Repeat([]byte{0xab}, 100))}
}

func BenchmarkAppendKey(b *testing.B) {
	v := benchTuple()
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendKey(buf[:0], v[0]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendTuple(b *testing.B) {
	v := benchTuple()
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendTuple(buf[:0], v)
	}
}

func BenchmarkDecodeTuple(b *testing.B) {
	enc := AppendTuple(nil, benchTuple())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeTuple(enc); err != nil {
			b.Fatal(err)
		}
	}
}
