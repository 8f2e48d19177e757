package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/backup"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/internal/server/servertest"
	"github.com/shardkit/shardkit/tuple"
)

// backupBuckets is the bucket count of the backup tests' clusters: few,
// so that the second replicaset's balance takes seconds.
const backupBuckets = 30

// backupCluster starts n instances (replication factor 1: n replicasets)
// with backupBuckets buckets, waits until the buckets are spread evenly
// with no move under way, and returns the --peer list and a client.
func startBackupCluster(t *testing.T, n int) (string, *client.Client) {
	t.Helper()
	return startBackupClusterWith(t, n, func(*server.InstanceConfig) {})
}

// startBackupClusterWith is startBackupCluster with each instance's
// configuration changed by tune.
func startBackupClusterWith(t *testing.T, n int, tune func(*server.InstanceConfig)) (string, *client.Client) {
	t.Helper()
	var addrs []string
	for i := range n {
		lis, addr := servertest.Listen(t)
		addrs = append(addrs, addr)
		cfg := server.InstanceConfig{Listener: lis, Peers: addrs[:1], InstanceID: fmt.Sprintf("i%d", i+1),
			InitBucketCount: backupBuckets, AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second}
		tune(&cfg)
		servertest.Run(t, cfg)
	}
	cl, err := client.New(t.Context(), client.Config{Peers: addrs, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	waitBalanced(t, cl, n)
	return strings.Join(addrs, ","), cl
}

// waitBalanced waits until the cluster has n replicasets holding
// backupBuckets/n buckets each, with no move under way.
func waitBalanced(t *testing.T, cl *client.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := cl.Sharding().Status(t.Context())
		if err == nil && !st.GetStale() && len(st.GetMoves()) == 0 && len(st.GetReplicasets()) == n {
			even := true
			for _, r := range st.GetReplicasets() {
				even = even && r.GetBuckets() == backupBuckets/uint32(n)
			}
			if even {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicasets not balanced within 3 minutes: %v (%v)", n, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rowsOf reads every row of space kv: its value by its key.
func rowsOf(t *testing.T, cl *client.Client) map[uint64]string {
	t.Helper()
	rows := map[uint64]string{}
	for r, err := range cl.Space("kv").Scan(t.Context(), client.ScanOptions{}) {
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		k, _ := r.Tuple[0].AsUint()
		if _, dup := rows[k]; dup {
			t.Fatalf("key %d scanned twice", k)
		}
		rows[k], _ = r.Tuple[1].AsString()
	}
	return rows
}

// A backup taken while writers write, of a two-replicaset cluster,
// verified, listed, and restored into a new cluster of one replicaset
// and into one of three: each restored cluster holds every row whose write
// was acknowledged before the backup began, and no row that was never
// written (a row written during the backup is in it or not, whole).
func TestBackupUnderWritesRestoresIntoOneAndThreeReplicasets(t *testing.T) {
	peers, src := startBackupCluster(t, 2)
	if code, _, errOut := runMain(t, "space", "create", "kv", "--peer", peers, "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); code != 0 {
		t.Fatalf("space create: %s", errOut)
	}
	if err := src.CreateUser(t.Context(), "app", client.RoleWriter); err != nil {
		t.Fatal(err)
	}
	value := func(k uint64) string { return fmt.Sprintf("v%d", k) }
	write := func(k uint64) error {
		_, err := src.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String(value(k))})
		return err
	}
	const before = 500
	for k := range uint64(before) {
		if err := write(k); err != nil {
			t.Fatalf("write %d: %v", k, err)
		}
	}
	// Writers go on during the backup: keys from before up, each tried
	// once; tried is how far they got.
	var mu sync.Mutex
	tried := uint64(before)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			k := tried
			tried++
			mu.Unlock()
			_ = write(k) // acknowledged or not: either may be in the backup
		}
	})
	dir := filepath.Join(t.TempDir(), "b1")
	// Small records: each bucket in several.
	code, out, errOut := runMain(t, "backup", "create", "--peer", peers, "--to", dir, "--chunk-rows", "7")
	close(stop)
	wg.Wait()
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("backed up %d buckets, ", backupBuckets)) {
		t.Fatalf("backup create: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runMain(t, "backup", "verify", dir); code != 0 || !strings.Contains(out, "ok, 30 buckets") {
		t.Fatalf("backup verify: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "backup", "list", dir, "--format", "json")
	var listed backupListJSON
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
		t.Fatalf("backup list: exit %d\n%s%s", code, out, errOut)
	}
	if len(listed.Spaces) != 1 || listed.Spaces[0].Name != "kv" || listed.Spaces[0].Rows < before || listed.BucketCount != backupBuckets || len(listed.Replicasets) != 2 {
		t.Fatalf("backup list: %+v", listed)
	}

	t.Logf("%d keys written before the backup, %d tried during it, %d rows backed up", before, tried-before, listed.Spaces[0].Rows)
	for _, n := range []int{1, 3} {
		dst, dcl := startBackupCluster(t, n)
		code, out, errOut := runMain(t, "backup", "restore", "--peer", dst, "--from", dir)
		if code != 0 {
			t.Fatalf("restore into %d replicasets: exit %d\n%s%s", n, code, out, errOut)
		}
		rows := rowsOf(t, dcl)
		for k := range uint64(before) {
			if rows[k] != value(k) {
				t.Fatalf("restored into %d replicasets: key %d, acknowledged before the backup, is %q", n, k, rows[k])
			}
		}
		for k, v := range rows {
			if k >= tried || v != value(k) {
				t.Fatalf("restored into %d replicasets: key %d = %q was never written (keys below %d were tried)", n, k, v, tried)
			}
		}
		if uint64(len(rows)) != listed.Spaces[0].Rows {
			t.Fatalf("restored into %d replicasets: %d rows, the backup lists %d", n, len(rows), listed.Spaces[0].Rows)
		}
		if c, err := dcl.Count(t.Context(), "kv"); err != nil || c != uint64(len(rows)) {
			t.Fatalf("restored into %d replicasets: count %d (%v), scanned %d", n, c, err, len(rows))
		}
		us, err := dcl.Users(t.Context())
		if err != nil || len(us) != 2 || us[1].GetName() != "app" || client.RoleName(us[1].GetRole()) != client.RoleWriter {
			t.Fatalf("restored into %d replicasets: users %v, %v; want root and app (writer)", n, us, err)
		}
		// The restored cluster takes writes, and a second restore is refused.
		if _, err := dcl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(0), tuple.String("after")}); err != nil {
			t.Fatalf("a write after the restore: %v", err)
		}
		code, _, errOut = runMain(t, "backup", "restore", "--peer", dst, "--from", dir)
		if code == 0 || !strings.Contains(errOut, "the cluster has spaces (kv)") {
			t.Fatalf("a restore into a cluster with data: exit %d: %s", code, errOut)
		}
	}

	code, out, errOut = runMain(t, "backup", "list", dir)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("; %d buckets, %d rows, ", backupBuckets, listed.Rows)) || !regexpLine(out, `^kv\s+\d+\s+\d+$`) {
		t.Fatalf("backup list (table): exit %d\n%s%s", code, out, errOut)
	}

	// A cluster of another bucket count is refused, saying both.
	lis, other := servertest.Listen(t)
	servertest.Run(t, server.InstanceConfig{Listener: lis, InitBucketCount: backupBuckets + 1, AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second})
	want := fmt.Sprintf("the cluster has %d buckets, the backup %d", backupBuckets+1, backupBuckets)
	pollFor(t, "the restore into a cluster of another bucket count refused", func() bool {
		code, _, errOut := runMain(t, "backup", "restore", "--peer", other, "--from", dir, "--timeout", "5s")
		return code != 0 && strings.Contains(errOut, want)
	})

	// Backing up into a directory that is not empty is refused; a backup
	// without its manifest is named incomplete by verify and refused by
	// restore.
	if code, _, errOut := runMain(t, "backup", "create", "--peer", peers, "--to", dir); code == 0 || !strings.Contains(errOut, "is not empty") {
		t.Fatalf("a backup into a used directory: exit %d: %s", code, errOut)
	}
	if err := os.Remove(filepath.Join(dir, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runMain(t, "backup", "verify", dir); code != 1 || !strings.Contains(errOut, "incomplete backup") {
		t.Fatalf("verify without a manifest: exit %d: %s", code, errOut)
	}
}

// Backups taken while the rebalancer moves buckets to a second replicaset
// that has just joined: a bucket being moved is refused by its source and
// asked again once the move is over, from its new holder; each backup
// restored holds every row written before it, once.
func TestBackupDuringMovesCapturesEachBucketOnce(t *testing.T) {
	var addrs []string
	var liss []net.Listener
	for range 2 {
		l, a := servertest.Listen(t)
		addrs, liss = append(addrs, a), append(liss, l)
	}
	start := func(i int) {
		servertest.Run(t, server.InstanceConfig{Listener: liss[i], Peers: addrs[:1], InstanceID: fmt.Sprintf("i%d", i+1),
			InitBucketCount: backupBuckets, AutoOfflineTimeout: 10 * time.Second, ShutdownTimeout: 5 * time.Second})
	}
	start(0)
	cl, err := client.New(t.Context(), client.Config{Peers: addrs, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, _, errOut := runMain(t, "space", "create", "kv", "--peer", addrs[0], "--field", "k:unsigned", "--field", "v:string", "--primary", "k", "--if-not-exists")
		if code == 0 {
			if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(0), tuple.String("v0")}); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster stores no row after 90s: %s", errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
	const rows = 3000
	for k := range uint64(rows) {
		if _, err := cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String(fmt.Sprintf("v%d", k))}); err != nil {
			t.Fatal(err)
		}
	}
	// The copies run paced, so that each move stays under way (its source
	// refusing its buckets) for many backups' time.
	if err := cl.Sharding().SetRebalancer(t.Context(), &datav1.RebalancerSettings{CopyBytesPerS: 16 << 10}, "copy_bytes_per_s"); err != nil {
		t.Fatal(err)
	}
	start(1)
	refused, taken := 0, 0
	var dirs []string
	withRefusals := "" // a backup that asked for a moving bucket again
	for round := 0; ; round++ {
		st, err := cl.Sharding().Status(t.Context())
		balanced := err == nil && !st.GetStale() && len(st.GetMoves()) == 0 && len(st.GetReplicasets()) == 2 && st.GetReplicasets()[1].GetBuckets() == backupBuckets/2
		if balanced || round >= 200 {
			break
		}
		dir := filepath.Join(t.TempDir(), fmt.Sprint("b", round))
		var last backup.Progress
		if _, err := backup.Create(t.Context(), backupCluster{cl}, dir, backup.CreateOptions{ChunkTuples: 50, Retry: 20 * time.Millisecond,
			Progress: func(p backup.Progress) { last = p }}); err != nil {
			t.Fatalf("backup %d during the moves: %v", round, err)
		}
		refused += last.Refused
		if last.Refused > 0 {
			withRefusals = dir
		}
		taken++
		dirs = append(dirs, dir)
	}
	t.Logf("%d backups during the moves; %d buckets refused (moving) and asked again", taken, refused)
	if withRefusals == "" {
		t.Fatal("no backup met a moving bucket: nothing was tested")
	}
	for _, dir := range dirs {
		if rep, err := backup.Verify(dir); err != nil || len(rep.Problems) > 0 {
			t.Fatalf("%s: %v %q", dir, err, rep.Problems)
		}
	}
	// A backup that met a moving bucket, restored.
	dst, dcl := startBackupCluster(t, 1)
	if code, out, errOut := runMain(t, "backup", "restore", "--peer", dst, "--from", withRefusals); code != 0 {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	got := rowsOf(t, dcl)
	if len(got) != rows {
		t.Fatalf("restored %d rows, want %d", len(got), rows)
	}
	for k := range uint64(rows) {
		if got[k] != fmt.Sprintf("v%d", k) {
			t.Fatalf("key %d restored as %q", k, got[k])
		}
	}
}
