package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// K14: expel of a follower and of the leader; the last instance never.
func TestExpel(t *testing.T) {
	c := newCluster(t, 3)
	c.startAll()
	c.waitOnline(3)
	// Replication factor 1: every replicaset is one instance, and its
	// buckets go with it (--lose-buckets; the refusal without it is
	// tested below and in docs/operations.md).
	c.stopRebalancer(t)
	st := c.waitOnline(3)
	lead := c.leader(st)
	var follower *instance
	for _, inst := range c.insts {
		if inst != lead {
			follower = inst
			break
		}
	}
	fid := st.byAddress(follower.Listen).InstanceID

	// An Online instance is not expelled without --force.
	_, errs, code := shardkit(30*time.Second, "expel", "--peer", lead.Listen, fid)
	if code == 0 || !strings.Contains(errs, "not Offline") {
		t.Fatalf("expel of an Online instance without --force: exit %d, stderr %q", code, errs)
	}
	// Stopped, it is; the command waits until Expelled and is idempotent.
	follower.term(t)
	for range 2 {
		if out, errs, code := shardkit(90*time.Second, "expel", "--peer", lead.Listen, "--lose-buckets", "--timeout", "60s", fid); code != 0 {
			t.Fatalf("expel %s: exit %d: %s %s", fid, code, out, errs)
		}
	}
	c.waitStatus("the follower Expelled and out of group 0", 30*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(follower.Listen)
		return i != nil && i.CurrentGrade.Variant == "Expelled" && i.RaftRole == "none"
	})
	if s, err := status(lead.Listen, false); err != nil || s.byAddress(follower.Listen) != nil {
		t.Fatalf("an expelled instance is listed without --all: %v %v", err, s)
	}
	// Restarting it fails with a clear message.
	follower.start(t)
	if code := follower.wait(t, 60*time.Second); code == 0 {
		t.Fatal("an expelled instance restarted with exit code 0")
	}
	if !strings.Contains(follower.LogText(), "expelled") {
		t.Fatalf("the restarted expelled instance did not say why it stopped")
	}

	// The leader, with --force while Online: leadership moves, the process exits.
	st, _ = status(lead.Listen, false)
	lid := st.byAddress(lead.Listen).InstanceID
	var other *instance
	for _, inst := range c.insts {
		if inst != lead && inst != follower {
			other = inst
		}
	}
	// If its replicaset holds the buckets (it was the first one full), it is
	// their only copy: the expel is refused unless it says to lose them
	// (it used to be accepted, stranding the buckets).
	args := []string{"expel", "--peer", other.Listen, "--force", "--timeout", "60s", lid}
	held := 0
	for _, rs := range st.Replicasets {
		if rs.ReplicasetID == st.byAddress(lead.Listen).ReplicasetID {
			held = rs.BucketCount
		}
	}
	t.Logf("the leader's replicaset holds %d buckets", held)
	if held > 0 {
		_, errs, code := shardkit(30*time.Second, args...)
		if want := fmt.Sprintf("which holds %d buckets", held); code == 0 || !strings.Contains(errs, want) || !strings.Contains(errs, "--lose-buckets") {
			t.Fatalf("expel of the last instance of a replicaset with buckets: exit %d, stderr %q; want a refusal saying %q", code, errs, want)
		}
		args = append(args, "--lose-buckets")
	}
	out, errs, code := shardkit(90*time.Second, args...)
	if code != 0 {
		t.Fatalf("expel of the leader: exit %d: %s %s", code, out, errs)
	}
	if want := fmt.Sprintf("lost: the data of the %d buckets", held); held > 0 && !strings.Contains(out, want) {
		t.Fatalf("expel with --lose-buckets printed %q; want %q", out, want)
	}
	if code := lead.wait(t, 60*time.Second); code == 0 {
		t.Fatalf("the expelled leader exited 0")
	}
	st = c.waitStatus("one instance left, leading", 30*time.Second, func(s *statusJSON) bool {
		return s.count(online) == 1 && s.LeaderRaftID == s.byAddress(other.Listen).RaftID
	})
	// The last instance cannot be expelled.
	_, errs, code = shardkit(30*time.Second, "expel", "--peer", other.Listen, "--force", "--lose-buckets", st.byAddress(other.Listen).InstanceID)
	if code == 0 || !strings.Contains(errs, "last instance") {
		t.Fatalf("expel of the last instance: exit %d, stderr %q", code, errs)
	}
}

// The leader is expelled (--force) while the only other instance is down:
// there is no successor yet, so the governor must go on bringing the other
// instance back Online (it becomes the successor) instead of waiting on the
// leader's downgrade forever.
func TestExpelLeaderWhileTheOtherIsDown(t *testing.T) {
	c := newCluster(t, 2)
	c.startAll()
	st := c.waitOnline(2)
	lead := c.leader(st)
	other := c.insts[0]
	if other == lead {
		other = c.insts[1]
	}
	lid := st.byAddress(lead.Listen).InstanceID
	other.term(t)
	c.waitStatus("the other instance Offline", 30*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(other.Listen)
		return i != nil && i.CurrentGrade.Variant == "Offline"
	})
	type result struct {
		out, errs string
		code      int
	}
	res := make(chan result, 1)
	go func() {
		// --lose-buckets: the leader's replicaset may hold every bucket.
		out, errs, code := shardkit(150*time.Second, "expel", "--peer", lead.Listen, "--force", "--lose-buckets", "--timeout", "120s", lid)
		res <- result{out, errs, code}
	}()
	c.waitStatus("the leader's target Expelled", 30*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(lead.Listen)
		return i != nil && i.TargetGrade.Variant == "Expelled"
	})
	other.start(t)
	if r := <-res; r.code != 0 {
		t.Fatalf("expel of the leader with the other instance back: exit %d: %s %s", r.code, r.out, r.errs)
	}
	if code := lead.wait(t, 60*time.Second); code == 0 {
		t.Fatal("the expelled leader exited 0")
	}
	c.waitStatus("the other instance Online and leading", 60*time.Second, func(s *statusJSON) bool {
		i := s.byAddress(other.Listen)
		return i != nil && online(i) && s.LeaderRaftID == i.RaftID
	})
}
