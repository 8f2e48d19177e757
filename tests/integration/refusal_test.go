package integration

import (
	"strings"
	"testing"
	"time"
)

// A process that cannot join exits non-zero with one line saying why, and
// changes nothing in the cluster.
func TestJoinRefusals(t *testing.T) {
	c := newCluster(t, 2)
	for i, inst := range c.insts {
		inst.Args = append(inst.Args, "--instance-id", []string{"alpha", "beta"}[i], "--failure-domain", "dc="+[]string{"a", "b"}[i])
	}
	c.startAll()
	st := c.waitOnline(2)

	check := func(name string, extra []string, want string) {
		t.Helper()
		j := c.add(extra...)
		j.start(t)
		if code := j.wait(t, 60*time.Second); code == 0 {
			t.Fatalf("%s: joiner exited 0", name)
		}
		var lines []string
		for _, l := range strings.Split(j.LogText(), "\n") {
			if strings.Contains(l, want) {
				lines = append(lines, l)
			}
		}
		if len(lines) == 0 {
			t.Fatalf("%s: log does not contain %q:\n%s", name, want, j.LogText())
		}
		after := c.waitOnline(2)
		if len(after.Instances) != len(st.Instances) {
			t.Fatalf("%s: the refused joiner changed the cluster: %d instances", name, len(after.Instances))
		}
	}
	check("duplicate instance_id", []string{"--instance-id", "alpha", "--failure-domain", "dc=c"}, `"alpha" is already joined`)
	check("cluster_id mismatch", []string{"--cluster-id", "other", "--failure-domain", "dc=c"}, `cluster_id mismatch: instance has "other", cluster has "demo"`)
	check("missing failure domain", nil, "missing failure domain names: dc")
	// Another instance's address: it used to join as a learner "at" that
	// instance's address (and then take 32 s to stop).
	check("advertise address of a live instance", []string{"--advertise", c.insts[0].Listen, "--failure-domain", "dc=c"},
		`advertise address `+c.insts[0].Listen+` belongs to instance "alpha"`)

	// Restart with a changed --instance-id is refused.
	a := c.insts[0]
	a.term(t)
	a.start(t, "--instance-id", "gamma")
	if code := a.wait(t, 30*time.Second); code == 0 {
		t.Fatal("restart with a changed --instance-id exited 0")
	}
	if !strings.Contains(a.LogText(), "different instance_id") {
		t.Fatalf("restart with a changed --instance-id: no clear message:\n%s", a.LogText())
	}
}

// Failure domains spread replicasets and voters; RF=2 with 4 instances
// gives 2 replicasets of 2.
func TestFailureDomainsAndReplicationFactor(t *testing.T) {
	c := newCluster(t, 4, "--init-replication-factor", "2")
	dcs := []string{"a", "a", "b", "b"}
	for i, inst := range c.insts {
		inst.Args = append(inst.Args, "--failure-domain", "dc="+dcs[i])
	}
	c.startAll()
	c.waitOnline(4)
	st := c.waitStatus("2 replicasets of 2 with weights", 30*time.Second, func(s *statusJSON) bool {
		if len(s.Replicasets) != 2 {
			return false
		}
		for _, rs := range s.Replicasets {
			if len(rs.Instances) != 2 || rs.Weight == 0 {
				return false
			}
		}
		return true
	})
	for _, rs := range st.Replicasets {
		got := map[string]bool{}
		for _, id := range rs.Instances {
			for _, i := range st.Instances {
				if i.InstanceID == id {
					got[i.FailureDomain["dc"]] = true
				}
			}
		}
		if !got["a"] || !got["b"] {
			t.Fatalf("replicaset %s does not span both dcs: %v", rs.ReplicasetID, rs.Instances)
		}
	}
	total := 0
	for _, rs := range st.Replicasets {
		total += rs.BucketCount
	}
	if total != 3000 {
		t.Fatalf("buckets assigned: %d, want 3000", total)
	}
	st = c.waitStatus("3 voters", 30*time.Second, func(s *statusJSON) bool { return len(voters(s)) == 3 })
	dcsOfVoters := map[string]bool{}
	for _, id := range voters(st) {
		dcsOfVoters[st.byRaftID(id).FailureDomain["dc"]] = true
	}
	if len(dcsOfVoters) != 2 {
		t.Fatalf("voters do not span both dcs: %v", voters(st))
	}
}
