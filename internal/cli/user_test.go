package cli

import (
	"strings"
	"testing"
)

// --password-stdin reads the first line, without its line break; an empty
// one is refused.
func TestReadPassword(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"s3cret pass\n":         "s3cret pass",
		"s3cret pass\r\nmore\n": "s3cret pass",
		"no newline":            "no newline",
		"\n":                    "",
		"":                      "",
	} {
		got, err := readPassword(strings.NewReader(in))
		switch {
		case want == "" && (err == nil || !strings.Contains(err.Error(), "stdin holds no password")):
			t.Errorf("%q: %q, %v; want a refusal", in, got, err)
		case want != "" && (err != nil || got != want):
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
}
