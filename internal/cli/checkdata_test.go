package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// check-data without --data-dir is a usage error (exit 2); a data dir
// with no database is named, exit 1, nothing created in it.
func TestCheckDataRefusesWhatItCannotCheck(t *testing.T) {
	if code, _, errOut := runMain(t, "check-data"); code != 2 || !strings.Contains(errOut, "check-data needs --data-dir") {
		t.Fatalf("check-data without --data-dir: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runMain(t, "check-data", "--data-dir", t.TempDir(), "--format", "yaml"); code != 2 || !strings.Contains(errOut, `invalid --format "yaml"`) {
		t.Fatalf("check-data --format yaml: exit %d, %q", code, errOut)
	}
	dir := t.TempDir()
	code, _, errOut := runMain(t, "check-data", "--data-dir", dir)
	if code != 1 || !strings.Contains(errOut, "open the database of "+dir) {
		t.Fatalf("check-data of an empty dir: exit %d, %q", code, errOut)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("check-data created %v in the dir it checked", m)
	}
}
