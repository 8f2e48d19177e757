package cli

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/tuple"
)

// The walkthrough of docs/operations.md, "A space drop undone": rows of
// two spaces, a backup, then `space drop orders` by mistake and more
// writes to the other space; a new cluster beside the old, the backup
// verified and restored into it, and the dropped space's rows scanned
// there as they were at the backup, every one, and nothing else.
func TestASpaceDropUndoneByRestoringTheLastBackup(t *testing.T) {
	peers, cl := startBackupCluster(t, 2)
	for _, sp := range []string{"orders", "users"} {
		if code, _, errOut := runMain(t, "space", "create", sp, "--peer", peers, "--field", "id:unsigned", "--field", "v:string", "--primary", "id"); code != 0 {
			t.Fatalf("space create %s: %s", sp, errOut)
		}
	}
	pollFor(t, "a write to the new spaces", func() bool {
		_, err := cl.Space("orders").Replace(t.Context(), tuple.Tuple{tuple.Uint(0), tuple.String("order 0")})
		return err == nil
	})
	var want []string
	for k := range uint64(200) {
		v := fmt.Sprintf("order %d", k)
		if _, err := cl.Space("orders").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String(v)}); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Space("users").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String("user")}); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("[%d,%q]", k, v))
	}
	dir := t.TempDir() + "/nightly"
	if code, out, errOut := runMain(t, "backup", "create", "--peer", peers, "--to", dir); code != 0 {
		t.Fatalf("backup create: exit %d\n%s%s", code, out, errOut)
	}
	// The mistake, and the cluster going on.
	if code, _, errOut := runMain(t, "space", "drop", "orders", "--peer", peers, "--force"); code != 0 {
		t.Fatalf("space drop: %s", errOut)
	}
	if _, err := cl.Space("users").Replace(t.Context(), tuple.Tuple{tuple.Uint(1000), tuple.String("after")}); err != nil {
		t.Fatal(err)
	}
	// 1. A new cluster with the same bucket count; 2. the backup, checked,
	// then restored into it; 3. the dropped space's rows.
	newPeers, ncl := startBackupCluster(t, 1)
	if code, out, errOut := runMain(t, "backup", "verify", dir); code != 0 || !strings.Contains(out, "ok") {
		t.Fatalf("backup verify: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runMain(t, "backup", "list", dir); code != 0 || !regexpLine(out, `^orders\s+\d+\s+200$`) {
		t.Fatalf("backup list: exit %d, want orders with 200 rows\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runMain(t, "backup", "restore", "--peer", newPeers, "--from", dir); code != 0 {
		t.Fatalf("backup restore: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := runMain(t, "scan", "orders", "--peer", newPeers, "--format", "jsonl")
	if code != 0 {
		t.Fatalf("scan orders: exit %d\n%s", code, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], " ", "")
	}
	slices.Sort(got)
	slices.Sort(want)
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], " ", "")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the restored orders: %d rows, want the 200 written before the backup\n%s", len(got), out)
	}
	// The write made after the backup is in the old cluster only; the
	// other space's rows from before it are in both.
	if r, _, err := ncl.Space("users").Select(t.Context(), []tuple.Value{tuple.Uint(1000)}, client.RW); err != nil || r.Found {
		t.Fatalf("a write made after the backup, read from the restored cluster: %+v, %v; want none", r, err)
	}
	if r, _, err := ncl.Space("users").Select(t.Context(), []tuple.Value{tuple.Uint(199)}, client.RW); err != nil || !r.Found {
		t.Fatalf("a users row written before the backup, read from the restored cluster: %+v, %v", r, err)
	}
}
