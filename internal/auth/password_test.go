package auth_test

import (
	"strings"
	"testing"

	"github.com/shardkit/shardkit/internal/auth"
)

// A password verifies against its own hash and no other; two hashes of one
// password differ (their salts); refusals name what is wrong.
func TestPasswordHashes(t *testing.T) {
	t.Parallel()
	h1, err := auth.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	h2, err := auth.HashPassword("correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if h1 == h2 || !strings.HasPrefix(h1, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h1, "correct") {
		t.Errorf("hashes %q, %q", h1, h2)
	}
	if err := auth.CheckHash(h1); err != nil {
		t.Errorf("CheckHash(%q): %v", h1, err)
	}
	for _, tc := range []struct {
		hash, pw string
		ok       bool
	}{
		{h1, "correct horse", true},
		{h2, "correct horse", true},
		{h1, "correct horsE", false},
		{h1, "", false},
		{"", "correct horse", false},
		{strings.Replace(h1, "t=2", "t=3", 1), "correct horse", false},
		{"$argon2id$v=19$m=4294967295,t=2,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5", "x", false},
	} {
		if got := auth.VerifyPassword(tc.hash, tc.pw); got != tc.ok {
			t.Errorf("VerifyPassword(%.40q, %q) = %v", tc.hash, tc.pw, got)
		}
	}
	for pw, says := range map[string]string{
		"short":                  "too short",
		strings.Repeat("x", 257): "too long",
		"line\nbreak":            "line break",
		"bad utf8 \xff\xfe":      "not valid UTF-8",
	} {
		if _, err := auth.HashPassword(pw); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("HashPassword(%.20q): %v; want %q", pw, err, says)
		}
	}
}

// FuzzVerifyPassword: any stored hash and password give an answer (a
// malformed hash: false), never a panic, and never true for a hash that
// CheckHash refuses.
func FuzzVerifyPassword(f *testing.F) {
	f.Add("$argon2id$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5", "pw")
	f.Add("$argon2id$v=19$m=19456,t=2,p=1$$", "")
	f.Add("$2a$10$abcdefghijklmnopqrstuv", "x")
	f.Fuzz(func(t *testing.T, h, pw string) {
		ok := auth.VerifyPassword(h, pw)
		if ok && auth.CheckHash(h) != nil {
			t.Fatalf("%q verifies %q but CheckHash refuses it", h, pw)
		}
	})
}
