package kvsm

import (
	"bytes"
	"testing"
)

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		{Op: OpPut, Key: []byte("k"), Value: []byte("v")},
		{Op: OpAppend, Key: []byte(""), Value: []byte("x")},
		{Op: OpGet, Key: []byte("key")},
		{Op: OpDelete, Key: bytes.Repeat([]byte("k"), 300)},
		{Op: OpSet, Key: []byte("k"), Value: []byte("blind")},
	} {
		got, err := Decode(c.Encode())
		if err != nil {
			t.Fatalf("decode %v: %v", c, err)
		}
		if got.Op != c.Op || !bytes.Equal(got.Key, c.Key) || !bytes.Equal(got.Value, c.Value) {
			t.Fatalf("round trip: got %+v, want %+v", got, c)
		}
	}
}

func TestDecodeRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {9, 0}, {byte(OpPut)}, {byte(OpPut), 5, 'a'}} {
		if _, err := Decode(b); err == nil {
			t.Errorf("Decode(%x) succeeded", b)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Command{Op: OpPut, Key: []byte("k"), Value: []byte("v")}.Encode())
	f.Add([]byte{byte(OpGet), 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(c.Encode())
		if err != nil || again.Op != c.Op || !bytes.Equal(again.Key, c.Key) || !bytes.Equal(again.Value, c.Value) {
			t.Fatalf("re-decode of %+v: %+v, %v", c, again, err)
		}
	})
}
