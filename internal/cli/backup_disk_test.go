package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/tuple"
)

// A backup onto a disk that fills up fails, saying so and naming the
// file, leaves no manifest (verify names the directory an incomplete
// backup) and none of its data files (the space is given back), and the
// cluster goes on taking writes. The disk is a tmpfs of 1 MiB, which
// needs root (mount); elsewhere the test is skipped.
func TestABackupToAFullDiskFailsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a filesystem")
	}
	disk := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small filesystem here (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", disk).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", disk, err, out)
		}
	})
	peers, cl := startBackupCluster(t, 3) // a file a replicaset: the first fits
	if code, _, errOut := runMain(t, "space", "create", "kv", "--peer", peers, "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); code != 0 {
		t.Fatalf("space create: %s", errOut)
	}
	// 0.6 MB of values, 1.2 with their history: more than the disk,
	// less than it a replicaset.
	value := strings.Repeat("x", 1000)
	for k := range uint64(600) {
		if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String(value)}); err != nil {
			t.Fatalf("write %d: %v", k, err)
		}
	}
	dir := filepath.Join(disk, "b")
	code, out, errOut := runMain(t, "backup", "create", "--peer", peers, "--to", dir, "--chunk-rows", "100")
	t.Logf("the backup: %s", errOut)
	if code == 0 || !strings.Contains(errOut, "no space left on device") || !strings.Contains(errOut, ".data") {
		t.Fatalf("a backup onto a full disk: exit %d, want a failure naming the file and the full disk\n%s%s", code, out, errOut)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the failed backup left %v in %s", names, dir)
	}
	if code, _, errOut := runMain(t, "backup", "verify", dir); code != 1 || !strings.Contains(errOut, "incomplete backup") {
		t.Fatalf("verify of the failed backup: exit %d: %s", code, errOut)
	}
	if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(1), tuple.String("after")}); err != nil {
		t.Fatalf("a write after the failed backup: %v", err)
	}
	// The same backup where there is room succeeds.
	if code, out, errOut := runMain(t, "backup", "create", "--peer", peers, "--to", t.TempDir()); code != 0 {
		t.Fatalf("the backup with room: exit %d\n%s%s", code, out, errOut)
	}
}
