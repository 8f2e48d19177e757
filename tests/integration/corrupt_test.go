package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newestWAL is the path of the newest Pebble write-ahead log in an
// instance's data dir.
func newestWAL(t *testing.T, inst *instance) string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(inst.dir, "data", "db", "*.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no write-ahead log in %s: %v", inst.dir, err)
	}
	slices.Sort(logs)
	return logs[len(logs)-1]
}

// A follower whose write-ahead log lost its tail while it was stopped
// (entries it had acknowledged are gone) used to panic in raft at every
// start, restarted by its supervisor forever. It now exits with the
// refusal code and one line saying what is damaged and how to recover; the
// recovery it names (expel, empty the data dir, start again) brings it
// back as a new instance.
func TestDamagedDataDirIsRefusedOnceAndRecovered(t *testing.T) {
	// Cut to 7000 bytes, a follower that joined by snapshot loses the
	// record that its restore finished; cut by its tail, the entries it
	// acknowledged last (raft: tocommit out of range).
	for _, tc := range []struct {
		name string
		cut  func(size int64) int64
	}{
		{"to 7000 bytes", func(int64) int64 { return 7000 }},
		{"by its last 1000 bytes", func(size int64) int64 { return size - 1000 }},
	} {
		t.Run(tc.name, func(t *testing.T) { testDamagedDataDir(t, tc.cut) })
	}
}

func testDamagedDataDir(t *testing.T, cut func(int64) int64) {
	t.Helper()
	c := newCluster(t, 3)
	c.startAll()
	c.waitOnline(3)
	c.stopRebalancer(t)
	st := c.waitOnline(3)
	// A follower of group 0. With replication factor 1 its replicaset's
	// data has no other copy: the recovery gives up its buckets
	// (--lose-buckets), as an operator would for a lost disk.
	var victim *instance
	for _, inst := range c.insts {
		if in := st.byAddress(inst.Listen); in != nil && in.RaftID != st.LeaderRaftID && victim == nil {
			victim = inst
		}
	}
	if victim == nil {
		t.Fatalf("no follower: %+v", st)
	}
	old := *st.byAddress(victim.Listen)
	lead := c.leader(st)

	victim.term(t)
	wal := newestWAL(t, victim)
	fi, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	size := cut(fi.Size())
	if size >= fi.Size() {
		t.Fatalf("write-ahead log %s has only %d bytes; nothing to cut", wal, fi.Size())
	}
	if err := os.Truncate(wal, size); err != nil {
		t.Fatal(err)
	}

	victim.start(t)
	code := victim.wait(t, 90*time.Second)
	run := victim.LastRun()
	if code != 91 {
		t.Fatalf("restart on a damaged data dir: exit code %d, want 91 (refused, not restarted):\n%s", code, run)
	}
	var damaged []string
	for _, l := range strings.Split(run, "\n") {
		if strings.Contains(l, "is damaged") {
			damaged = append(damaged, l)
		}
	}
	if len(damaged) != 1 {
		t.Fatalf("want one line saying the data dir is damaged, got %d:\n%s", len(damaged), run)
	}
	line := damaged[0]
	t.Logf("refused: %s", line)
	for _, want := range []string{"shardkit: data dir ", "raft", old.InstanceID, "shardkit expel", "empty the data dir"} {
		if !strings.Contains(line, want) {
			t.Errorf("the line %q does not say %q", line, want)
		}
	}
	for _, bad := range []string{"panic:", "worker crashed", "level=ERROR"} {
		if strings.Contains(run, bad) {
			t.Errorf("the refused start logged %q:\n%s", bad, run)
		}
	}

	// The recovery the line names.
	if out, errs, code := shardkit(90*time.Second, "expel", "--peer", lead.Listen, "--force", "--lose-buckets", "--timeout", "60s", old.InstanceID); code != 0 {
		t.Fatalf("expel %s: exit %d: %s %s", old.InstanceID, code, out, errs)
	}
	if err := os.RemoveAll(filepath.Join(victim.dir, "data")); err != nil {
		t.Fatal(err)
	}
	victim.start(t)
	st = c.waitStatus("3 instances Online, 3 voters and a leader", 90*time.Second, func(s *statusJSON) bool {
		return s.LeaderRaftID != 0 && len(voters(s)) == 3 && s.count(online) == 3
	})
	var back *instanceJSON
	for i := range st.Instances {
		if in := &st.Instances[i]; in.Address == victim.Listen && online(in) {
			back = in
		}
	}
	if back == nil || back.RaftID <= old.RaftID || back.UUID == old.UUID {
		t.Fatalf("the recovered instance is not a new one Online: before %+v, now %+v", old, back)
	}
	t.Logf("recovered: %s is now %s (raft_id %d)", old.InstanceID, back.InstanceID, back.RaftID)
}
