package server_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/internal/storage"
	"github.com/shardkit/shardkit/tuple"
)

// runRefused runs an instance on dataDir and returns the refusal it must
// end with at once.
func runRefused(t *testing.T, dataDir string) string {
	t.Helper()
	l, _ := servertest.Listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := server.RunInstance(ctx, server.InstanceConfig{Listener: l, DataDir: dataDir, InstanceID: "i7"}, "")
	var ref *server.RefusedError
	if !errors.As(err, &ref) {
		t.Fatalf("RunInstance: %v (%T); want a refusal", err, err)
	}
	return err.Error()
}

// A data dir whose database lost its MANIFEST is refused with what is
// missing and how to recover; it used to be asked whether another instance
// was using the data dir.
func TestMissingManifestIsNamedWithTheRecovery(t *testing.T) {
	dir := t.TempDir()
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("k"), []byte("v"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ms, _ := filepath.Glob(filepath.Join(dir, "db", "MANIFEST-*"))
	for _, m := range ms {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	msg := runRefused(t, dir)
	for _, want := range []string{"data dir " + dir + " is damaged", "MANIFEST", "is missing", "shardkit expel", "--force i7", "empty the data dir"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "another") {
		t.Errorf("refusal %q blames another instance", msg)
	}
}

// A data dir whose database is open elsewhere keeps the hint about
// another instance, and only that one.
func TestLockedDataDirSaysAnotherProcessHasIt(t *testing.T) {
	dir := t.TempDir()
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	msg := runRefused(t, dir)
	if !strings.Contains(msg, "another process has it open (is another instance using this data dir?)") || strings.Contains(msg, "damaged") {
		t.Fatalf("refusal %q; want the lock hint and nothing about damage", msg)
	}
}

// A table file of a stopped instance corrupted on disk: the restarted
// instance refuses to go on, naming the corrupt file. Pebble used to
// report such corruption with a panic in whichever goroutine found it
// (often a compaction), killing the process at every start.
func TestCorruptTableIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, addr := servertest.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- server.RunInstance(ctx, server.InstanceConfig{Listener: l, DataDir: dir, ShutdownTimeout: 5 * time.Second}, "boot")
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := getStatus(addr)
		if err == nil && len(st.GetInstances()) == 1 && st.GetInstances()[0].GetInstance().GetCurrentGrade().GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_ONLINE {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the instance is not Online after 60s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("first run: %v", err)
	}
	// Everything into table files, then damage them.
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ssts, _ := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no table file to corrupt")
	}
	for _, f := range ssts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 64; i < len(b)-64; i += 101 {
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	msg := runRefused(t, dir)
	if !strings.Contains(msg, "data dir "+dir+" is damaged") || !strings.Contains(msg, ".sst") || !strings.Contains(msg, "shardkit expel") {
		t.Fatalf("refusal %q does not name the damaged table and the recovery", msg)
	}
	t.Logf("refused: %s", msg)
}

// An instance keeps the data of its raft log's large entries (a bucket
// copy's chunks, a large write) as files in <data dir>/raft-sideloaded,
// and serves what it wrote through them.
func TestALargeWriteIsSideloadedInTheDataDir(t *testing.T) {
	l, addr := servertest.Listen(t)
	servertest.Run(t, server.InstanceConfig{Listener: l, AutoOfflineTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second, InitBucketCount: 30})
	// servertest's data dirs are the test's temporary directories
	// (<t.TempDir()'s parent>/NNN/run-N), as is this one.
	tmp := filepath.Dir(t.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Peers: []string{addr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := strings.Repeat("v", 600<<10) // above the 256-KiB threshold
	pollOK(t, "the space and the large write", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "s", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		if err == nil {
			_, err = c.Space("s").Replace(ctx, tuple.Tuple{tuple.Uint(1), tuple.String(big)})
		}
		return err
	})
	r, _, err := c.Space("s").Select(ctx, []tuple.Value{tuple.Uint(1)}, client.RW)
	if err != nil || !r.Found || len(r.Tuple) != 2 {
		t.Fatalf("the large tuple read back: %d fields, found %v, %v", len(r.Tuple), r.Found, err)
	}
	if v, _ := r.Tuple[1].AsString(); v != big {
		t.Fatalf("the large tuple read back holds %d bytes, not the %d written", len(v), len(big))
	}
	files, err := filepath.Glob(filepath.Join(tmp, "*", "run-*", "raft-sideloaded", "*", "i*.t*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("sideloaded files in the data dir: %v, %v; want the large write's", files, err)
	}
	var largest int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			largest = max(largest, st.Size())
		}
	}
	if largest < int64(len(big)) {
		t.Fatalf("sideloaded files %v: the largest holds %d bytes; want the write's %d or more", files, largest, len(big))
	}
}

// CheckDataDir reads a stopped instance's data: its replicaset's data
// sound, with its applied index, last command and digest; a count broken on disk is
// named with its bucket; a running instance's data dir is refused.
func TestCheckDataDirFindsABrokenCount(t *testing.T) {
	dir := t.TempDir()
	l, addr := servertest.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- server.RunInstance(ctx, server.InstanceConfig{Listener: l, DataDir: dir, ShutdownTimeout: 5 * time.Second}, "boot")
	}()
	c, err := client.New(ctx, client.Config{Peers: []string{addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pollOK(t, "the space", func() error {
		_, err := c.CreateSpace(ctx, client.SpaceDef{Name: "kv", Format: tuple.Format{{Name: "k", Type: tuple.TypeUnsigned}, {Name: "v", Type: tuple.TypeString}},
			PrimaryKey: []string{"k"}}, true)
		return err
	})
	for i := range 20 {
		pollOK(t, "a row", func() error {
			_, err := c.Space("kv").Replace(ctx, tuple.Tuple{tuple.Uint(uint64(i)), tuple.String("v")})
			return err
		})
	}
	if _, err := server.CheckDataDir(dir); err == nil || !strings.Contains(err.Error(), "must be stopped first") {
		t.Fatalf("CheckDataDir of a running instance's data dir: %v; want a refusal naming the running instance", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	groups, err := server.CheckDataDir(dir)
	if err != nil || len(groups) != 2 || groups[0].Group != 0 || groups[1].Group == 0 {
		t.Fatalf("CheckDataDir = %+v, %v; want group 0's state, then one replicaset's data", groups, err)
	}
	for _, g := range groups {
		if g.Applied == 0 || g.LastCommand == 0 || g.LastCommand > g.Applied || len(g.Digest) != 16 || len(g.Problems) != 0 {
			t.Fatalf("group %d: %+v; want applied, its last command at or below the applied index, a digest, sound", g.Group, g)
		}
	}
	zeroDigest := groups[0].Digest
	groups = groups[1:]
	// One count raised by hand, on disk.
	db, err := storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	counts := append(storage.GroupPrefix(storage.PrefixData, groups[0].Group), storage.DataCount, '/')
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: counts, UpperBound: storage.PrefixEnd(counts)})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() {
		t.Fatal("no count stored")
	}
	k := append([]byte(nil), it.Key()...)
	n := binary.BigEndian.Uint64(it.Value())
	_ = it.Close()
	if err := db.Set(k, binary.BigEndian.AppendUint64(nil, n+1), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bucket := binary.BigEndian.Uint32(k[len(counts):])
	groups, err = server.CheckDataDir(dir)
	if err != nil || len(groups) != 2 || groups[0].Digest != zeroDigest {
		t.Fatalf("CheckDataDir after a replicaset's count was raised = %+v, %v; want group 0's digest unchanged (%s)", groups, err, zeroDigest)
	}
	groups = groups[1:]
	want := fmt.Sprintf("bucket %d (ACTIVE(generation 1, peer \"\")) holds %d tuples of space", bucket, n)
	if len(groups[0].Problems) != 1 || !strings.Contains(groups[0].Problems[0], want) || !strings.Contains(groups[0].Problems[0], fmt.Sprintf("but counts %d", n+1)) {
		t.Fatalf("CheckDataDir after a count was raised = %+v, %v; want the problem %q... counts %d", groups, err, want, n+1)
	}
}
