package lines

import (
	"errors"
	"strings"
	"testing"
)

func TestEachSkipsBlankAndCommentLinesAndNumbersTheRest(t *testing.T) {
	var got []string
	err := Each([]byte("# header\n\n a  b \n#x\nc d e\n"), func(line int, text string, fields []string) error {
		got = append(got, strings.Join(fields, "|")+"@"+text+"@"+string(rune('0'+line)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a|b@a  b@3", "c|d|e@c d e@5"}; strings.Join(got, ";") != strings.Join(want, ";") {
		t.Fatalf("records %q, want %q", got, want)
	}
}

func TestEachStopsAtTheFirstErrorAndRefusesHugeLines(t *testing.T) {
	stop := errors.New("stop")
	calls := 0
	if err := Each([]byte("a\nb\n"), func(int, string, []string) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("Each = %v after %d calls, want stop after 1", err, calls)
	}
	huge := strings.Repeat("x", MaxLine+1)
	if err := Each([]byte(huge), func(int, string, []string) error { return nil }); !errors.Is(err, ErrRead) {
		t.Fatal("a line over MaxLine was read")
	}
}
