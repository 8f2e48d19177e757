package cli

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestVersionPrintsVersionCommitAndGo(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"version"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errOut.String())
	}
	for _, want := range []string{"shardkit " + version, "commit " + commit, "go " + runtime.Version()} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("version output %q lacks %q", out.String(), want)
		}
	}
}

func TestUnknownCommandFails(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"no-such-command"}, nil, &out, &errOut); code == 0 {
		t.Fatalf("unknown command exited 0")
	}
	if !strings.Contains(errOut.String(), "no-such-command") {
		t.Errorf("stderr %q does not name the unknown command", errOut.String())
	}
}
