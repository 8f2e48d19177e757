package cli

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shardkit/shardkit/client"
	"github.com/shardkit/shardkit/internal/backup"
	"github.com/shardkit/shardkit/internal/server"
	"github.com/shardkit/shardkit/tuple"
)

// kvOp is one write of kvModel: its value after ("" for a delete), and
// when it began and ended on the model's clock.
type kvOp struct {
	value      string
	start, end uint64
	acked      bool
}

// kvModel records every write to space kv (key k: "v<k>-<n>", or a
// delete), each key written by one goroutine at a time, on a clock that
// also marks when backups begin and end.
type kvModel struct {
	clock atomic.Uint64
	mu    sync.Mutex
	ops   map[uint64][]kvOp
	n     int
}

func (m *kvModel) tick() uint64 { return m.clock.Add(1) }

// write replaces key k with a new value, or deletes it, and records it.
func (m *kvModel) write(t *testing.T, cl *client.Client, k uint64, del bool) {
	t.Helper()
	m.mu.Lock()
	m.n++
	op := kvOp{value: fmt.Sprintf("v%d-%d", k, m.n)}
	m.mu.Unlock()
	op.start = m.tick()
	var err error
	if del {
		op.value = ""
		_, err = cl.Space("kv").Delete(t.Context(), []tuple.Value{tuple.Uint(k)})
	} else {
		_, err = cl.Space("kv").Replace(t.Context(), tuple.Tuple{tuple.Uint(k), tuple.String(op.value)})
	}
	op.end, op.acked = m.tick(), err == nil
	m.mu.Lock()
	m.ops[k] = append(m.ops[k], op)
	m.mu.Unlock()
}

// allowed is what key k may hold in a backup whose capture began at from
// and ended by to: the value of its last write acknowledged before from
// (none: absent), or of a later write begun before to, or of a write not
// acknowledged.
func (m *kvModel) allowed(k uint64, from, to uint64) map[string]bool {
	ops := m.ops[k]
	last := -1
	for i, op := range ops {
		if op.acked && op.end < from {
			last = i
		}
	}
	ok := map[string]bool{"": last < 0}
	if last >= 0 {
		ok[ops[last].value] = true
	}
	for i, op := range ops {
		if (i > last && op.start < to) || !op.acked {
			ok[op.value] = true
		}
	}
	return ok
}

// touched reports whether a write of key k was under way between from
// and to.
func (m *kvModel) touched(k uint64, from, to uint64) bool {
	for _, op := range m.ops[k] {
		if op.start < to && op.end > from {
			return true
		}
	}
	return false
}

// check fails unless rows (value by key) holds for every key what a
// backup begun at from and ended by to may: every write acknowledged
// before from (none missing), nothing never written.
func (m *kvModel) check(t *testing.T, what string, rows map[uint64]string, from, to uint64) {
	t.Helper()
	for k, v := range rows {
		if _, ok := m.ops[k]; !ok {
			t.Fatalf("%s: key %d = %q was never written", what, k, v)
		}
	}
	for k := range m.ops {
		if ok := m.allowed(k, from, to); !ok[rows[k]] {
			t.Fatalf("%s: key %d holds %q; its writes %+v allow %v", what, k, rows[k], m.ops[k], ok)
		}
	}
}

// A full backup and two incrementals after it, each taken while writers
// replace and delete rows (and between them): the chain of three
// restored (into two replicasets) equals, row for row, a full backup
// taken right after the last incremental (restored into one), except on
// keys being written while the two were taken; and each holds every
// write acknowledged before the last incremental began and nothing never
// written. The source keeps 16 revisions of history a bucket, and one
// key is written 200 times before the last incremental, so that its
// bucket's history no longer reaches back: that bucket comes whole, the
// others as their changes.
func TestBackupIncrementalChainRestoresAsAFullBackup(t *testing.T) {
	peers, src := startBackupClusterWith(t, 2, func(c *server.InstanceConfig) { c.HistoryRevisions = 16 })
	if code, _, errOut := runMain(t, "space", "create", "kv", "--peer", peers, "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); code != 0 {
		t.Fatalf("space create: %s", errOut)
	}
	const keys = 600
	m := &kvModel{ops: map[uint64][]kvOp{}}
	for k := range uint64(keys) {
		m.write(t, src, k, false)
	}
	// Two writers, each its own keys (even, odd): a replace, or one in
	// four a delete, of a random key.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range uint64(2) {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w, 39))
			for {
				select {
				case <-stop:
					return
				default:
				}
				m.write(t, src, rng.Uint64N(keys/2)*2+w, rng.IntN(4) == 0)
			}
		})
	}
	written := func() int {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.n
	}
	waitWrites := func(n int) {
		from := written()
		pollFor(t, fmt.Sprintf("%d more writes", n), func() bool { return written() >= from+n })
	}
	root := t.TempDir()
	dir := func(name string) string { return filepath.Join(root, name) }
	create := func(name string, args ...string) string {
		t.Helper()
		code, out, errOut := runMain(t, append([]string{"backup", "create", "--peer", peers, "--to", dir(name), "--chunk-rows", "7"}, args...)...)
		if code != 0 {
			t.Fatalf("backup create %s: exit %d\n%s%s", name, code, out, errOut)
		}
		return out
	}
	create("full")
	waitWrites(300)
	create("inc1", "--incremental-from", dir("full"))
	waitWrites(300)
	for range 200 {
		m.write(t, src, keys, false) // a key of its own, the writers' none
	}
	from := m.tick()
	out := create("inc2", "--incremental-from", dir("inc1"))
	create("same")
	to := m.tick()
	close(stop)
	wg.Wait()
	t.Logf("%d writes; the last incremental: %s", written(), out)

	code, out, errOut := runMain(t, "backup", "verify", dir("inc2"))
	if code != 0 || !strings.Contains(out, "ok, 30 buckets") || !strings.Contains(out, "its chain of 3 backups verified") {
		t.Fatalf("backup verify: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runMain(t, "backup", "list", dir("inc2"), "--format", "json")
	var listed backupListJSON
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil {
		t.Fatalf("backup list: exit %d\n%s%s", code, out, errOut)
	}
	kinds := []string{}
	for _, l := range listed.Chain {
		kinds = append(kinds, filepath.Base(l.Dir)+":"+l.Kind)
	}
	if listed.Kind != "incremental" || !slices.Equal(kinds, []string{"full:full", "inc1:incremental", "inc2:incremental"}) {
		t.Fatalf("backup list: kind %s, chain %v", listed.Kind, kinds)
	}
	// The hot key's bucket came whole; most came as their changes.
	for _, name := range []string{"inc1", "inc2"} {
		mf, err := backup.ReadManifest(dir(name))
		if err != nil {
			t.Fatal(err)
		}
		sets := 0
		for _, f := range mf.Files {
			sets += len(f.Changes)
		}
		if sets == 0 || (name == "inc2" && sets == backupBuckets) {
			t.Fatalf("%s holds %d of %d buckets as change sets", name, sets, backupBuckets)
		}
		t.Logf("%s: %d of %d buckets as change sets", name, sets, backupBuckets)
	}

	chainPeers, chainCl := startBackupCluster(t, 2)
	code, restored, errOut := runMain(t, "backup", "restore", "--peer", chainPeers, "--from", dir("inc2"))
	if code != 0 {
		t.Fatalf("restore of the chain: exit %d\n%s%s", code, restored, errOut)
	}
	samePeers, sameCl := startBackupCluster(t, 1)
	if code, out, errOut := runMain(t, "backup", "restore", "--peer", samePeers, "--from", dir("same")); code != 0 {
		t.Fatalf("restore of the full backup: exit %d\n%s%s", code, out, errOut)
	}
	chain, same := rowsOf(t, chainCl), rowsOf(t, sameCl)
	if want := fmt.Sprintf("restored %d buckets, %d rows, ", backupBuckets, len(chain)); !strings.HasPrefix(restored, want) {
		t.Fatalf("restore of the chain says %q, want %q...", restored, want)
	}
	m.check(t, "the chain restored", chain, from, to)
	m.check(t, "the full backup restored", same, from, to)
	compared := 0
	for k := range m.ops {
		if m.touched(k, from, to) {
			continue
		}
		compared++
		if chain[k] != same[k] {
			t.Fatalf("key %d: the chain restored holds %q, the full backup %q", k, chain[k], same[k])
		}
	}
	if compared < keys/2 {
		t.Fatalf("only %d of %d keys were still while the two were taken: nothing compared", compared, len(m.ops))
	}
	t.Logf("%d rows restored from the chain, %d from the full backup; %d keys compared row for row", len(chain), len(same), compared)
	if c, err := chainCl.Count(t.Context(), "kv"); err != nil || c != uint64(len(chain)) {
		t.Fatalf("the chain restored: count %d (%v), scanned %d", c, err, len(chain))
	}

	// kv dropped and created again: its rows are another space's, and an
	// incremental from a base of the old kv is refused, naming it.
	if code, _, errOut := runMain(t, "space", "drop", "kv", "--peer", peers, "--force"); code != 0 {
		t.Fatalf("space drop: %s", errOut)
	}
	if code, _, errOut := runMain(t, "space", "create", "kv", "--peer", peers, "--field", "k:unsigned", "--field", "v:string", "--primary", "k"); code != 0 {
		t.Fatalf("space create: %s", errOut)
	}
	code, _, errOut = runMain(t, "backup", "create", "--peer", peers, "--to", dir("inc3"), "--incremental-from", dir("inc2"))
	if code == 0 || !strings.Contains(errOut, "has space kv with id ") || !strings.Contains(errOut, "take a full backup") {
		t.Fatalf("an incremental across a space created again: exit %d: %s", code, errOut)
	}
}
