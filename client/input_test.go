package client_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The server refuses, from any client, a string that is not valid UTF-8 (a
// string holds text; bytes fields hold bytes), in a tuple and in a key,
// naming the field.
func TestTheServerRefusesAStringThatIsNotUTF8(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "utf8_offers")
	_, err := s.Insert(ctx, offer(1, "bad\xff\xfe", 1))
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "field 2 (offer): the string is not valid UTF-8: byte 0xff at offset 3") {
		t.Fatalf("insert of a string with bytes 0xff 0xfe: %v, want ErrInvalid naming field 2", err)
	}
	_, err = s.Insert(ctx, append(offer(1, "a", 1), tuple.String("\xed\xb0\x80")))
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "field 4: the string is not valid UTF-8") {
		t.Fatalf("insert of an encoded surrogate beyond the format: %v, want ErrInvalid naming field 4", err)
	}
	_, _, err = s.Select(ctx, key(1, "bad\xff"), client.RW)
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "field 2 (offer): the string is not valid UTF-8") {
		t.Fatalf("select of a key that is not UTF-8: %v, want ErrInvalid", err)
	}
	if _, err := s.Insert(ctx, offer(1, "caf\u00e9 \U0001F600 \ufffd", 1)); err != nil {
		t.Fatalf("insert of valid UTF-8 (U+FFFD included): %v", err)
	}
}

// A key over tuple.MaxKeyBytes gets the same refusal from a read as from
// a write (a read does not answer "not found" for a key no write takes).
func TestAKeyOverMaxKeyBytesIsRefusedByReadsAndWritesAlike(t *testing.T) {
	c := dataClient(t)
	ctx := t.Context()
	s := offersSpace(t, c, "bigkey_offers")
	big := key(1, strings.Repeat("k", 5000))
	const want = "the key: a key of 5012 bytes is more than 4096"
	_, _, err := s.Select(ctx, big, client.RW)
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("select of a 5000-byte key: %v, want ErrInvalid containing %q", err, want)
	}
	_, _, err = s.Select(ctx, big, client.RO)
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("ro select of a 5000-byte key: %v, want ErrInvalid containing %q", err, want)
	}
	_, err = s.Delete(ctx, big)
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("delete of a 5000-byte key: %v, want ErrInvalid containing %q", err, want)
	}
	_, err = s.Update(ctx, big, []tuple.Op{{Code: tuple.OpAssign, Field: tuple.FieldRef{Name: "price"}, Arg: tuple.Double(1)}})
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("update of a 5000-byte key: %v, want ErrInvalid containing %q", err, want)
	}
}
