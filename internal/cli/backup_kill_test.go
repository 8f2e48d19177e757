package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/backup"
	"github.com/shardkit/shardkit/tests/framework"
	"github.com/shardkit/shardkit/tuple"
)

// A backup of two `shardkit run` processes (two replicasets of one
// instance each) during which the instance of one replicaset is killed
// -9 as the backup turns to it, after the other's file is whole: the
// backup fails, naming the replicaset, and leaves no manifest (verify
// names the directory an incomplete backup,
// restore refuses it) and none of the data files it wrote before.
func TestBackupWhoseSourceIsKilledLeavesNoManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real instances")
	}
	addrs := framework.FreePorts(t, 2) // the instances bind them themselves
	var procs []*os.Process
	for i, a := range addrs {
		cmd, _, _ := startShardkit(t, "run", "--instance-id", fmt.Sprintf("i%d", i+1), "--listen", a, "--peer", addrs[0],
			"--data-dir", t.TempDir(), "--init-bucket-count", fmt.Sprint(backupBuckets))
		procs = append(procs, cmd.Process)
	}
	cl, err := client.New(t.Context(), client.Config{Peers: addrs, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waitBalanced(t, cl, 2)
	if code, _, errOut := runMain(t, "space", "create", "kv", "--peer", addrs[0], "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); code != 0 {
		t.Fatalf("space create: %s", errOut)
	}
	// The client learns the new space when its routing is read again.
	pollFor(t, "a write to the new space", func() bool {
		_, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(0), tuple.String("v")})
		return err == nil
	})
	for k := range uint64(300) {
		if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String("v")}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "b")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The replicasets are read beside each other: r2's instance dies when
	// the backup first dials it, once r1's file is whole (replicasets are
	// named after their instance: i2's is r2).
	var before []string // the data files when the instance was killed
	r1Done := make(chan struct{})
	kill := sync.OnceFunc(func() {
		select {
		case <-r1Done:
		case <-time.After(30 * time.Second):
			t.Error("r1's file was not whole within 30 s")
		}
		before = glob(t, filepath.Join(dir, "*.data"))
		if err := procs[1].Kill(); err != nil {
			t.Error(err)
		}
		// The worker dies with its parent (a parent-death signal), a
		// moment later: the backup goes on once it has.
		pollFor(t, "the killed instance's port to close", func() bool {
			c, err := net.DialTimeout("tcp", addrs[1], time.Second)
			if err == nil {
				c.Close()
			}
			return err != nil
		})
	})
	cluster := killOnDial{backupCluster: backupCluster{cl}, victim: addrs[1], kill: kill}
	_, err = backup.Create(ctx, cluster, dir, backup.CreateOptions{ChunkTuples: 3, Progress: func(p backup.Progress) {
		if len(glob(t, filepath.Join(dir, "r1-*.data"))) > 0 && p.Buckets > 0 {
			select {
			case <-r1Done:
			default:
				close(r1Done)
			}
		}
	}})
	if err == nil {
		t.Fatal("the backup completed without the killed instance's buckets")
	}
	t.Logf("the backup failed: %v", err)
	if !strings.Contains(err.Error(), "replicaset r") {
		t.Fatalf("the failure does not name the replicaset: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, backup.ManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed backup left a manifest: %v", err)
	}
	if len(before) == 0 {
		t.Fatal("no data file of the replicaset captured before the kill: the kill came before the backup")
	}
	if files := glob(t, filepath.Join(dir, "*.data")); len(files) > 0 {
		t.Fatalf("the failed backup left its data files %v (of %v before the kill)", files, before)
	}
	if code, _, errOut := runMain(t, "backup", "verify", dir); code != 1 || !strings.Contains(errOut, "incomplete backup") {
		t.Fatalf("verify of the failed backup: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runMain(t, "backup", "restore", "--peer", addrs[0], "--from", dir, "--timeout", "10s"); code == 0 || !strings.Contains(errOut, "incomplete backup") {
		t.Fatalf("restore of the failed backup: exit %d: %s", code, errOut)
	}
}

// killOnDial is a backup's view of the cluster that calls kill before it
// first dials victim, the address of the instance the test kills.
type killOnDial struct {
	backupCluster
	victim string
	kill   func()
}

func (k killOnDial) Dial(addr string) (grpc.ClientConnInterface, error) {
	if addr == k.victim {
		k.kill()
	}
	return k.backupCluster.Dial(addr)
}

// A `shardkit backup create` process killed -9 while it writes leaves a
// directory with data files and no manifest: verify names it an
// incomplete backup and restore refuses it. A kill that comes after the
// backup ended proves nothing, so the backup is made slower (more rows,
// a row a record) and taken again, up to three times.
func TestABackupProcessKilledMidwayLeavesAnIncompleteBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real backup process")
	}
	peers, cl := startBackupCluster(t, 3)
	if code, _, errOut := runMain(t, "space", "create", "kv", "--peer", peers, "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); code != 0 {
		t.Fatalf("space create: %s", errOut)
	}
	rows := uint64(0)
	for attempt := range 3 {
		for more := rows + 1000<<(2*attempt); rows < more; rows++ {
			if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(rows), tuple.String("v")}); err != nil {
				t.Fatal(err)
			}
		}
		dir := filepath.Join(t.TempDir(), "b")
		cmd, out, done := startShardkit(t, "backup", "create", "--peer", peers, "--to", dir, "--chunk-rows", "1")
		pollFor(t, "the backup's first data file", func() bool {
			select {
			case err := <-done:
				done <- err // for startShardkit's cleanup
				t.Fatalf("backup create ended before a data file was seen (%v): %s", err, out.String())
			default:
			}
			return len(glob(t, filepath.Join(dir, "*.data"))) > 0
		})
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		done <- <-done // ended; left for startShardkit's cleanup
		if _, err := os.Stat(filepath.Join(dir, backup.ManifestName)); err == nil {
			// A manifest: the backup ended before the kill, and is whole.
			if rep, err := backup.Verify(dir); err != nil || len(rep.Problems) > 0 {
				t.Fatalf("a backup killed midway left a manifest, and it does not verify: %v %v", err, rep)
			}
			t.Logf("attempt %d: the backup of %d rows ended before the kill; again with more rows", attempt+1, rows)
			continue
		}
		code, stdout, errOut := runMain(t, "backup", "verify", dir)
		if code != 1 || !strings.Contains(errOut+stdout, "incomplete backup") {
			t.Fatalf("verify of a backup killed midway: exit %d: %s%s", code, stdout, errOut)
		}
		if code, _, errOut := runMain(t, "backup", "restore", "--peer", peers, "--from", dir, "--timeout", "10s"); code == 0 || !strings.Contains(errOut, "incomplete backup") {
			t.Fatalf("restore of a backup killed midway: exit %d: %s", code, errOut)
		}
		return
	}
	t.Fatalf("every backup ended before its process was killed (%d rows at the last)", rows)
}
