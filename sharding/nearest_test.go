package sharding

import "testing"

type member struct {
	addr   string
	domain map[string]string
}

// A read-only call goes to the member nearest by failure domain and, among
// the nearest, to a read-only one (a follower), not the leader that serves
// the writes (R2, R6); to the leader only when no follower is as near, or
// when the leader is not known, at random among all the nearest.
func TestNearestPrefersAFollowerInTheCallersZone(t *testing.T) {
	self := map[string]string{"dc": "a", "rack": "1"}
	lead := member{"lead", map[string]string{"dc": "a"}}
	nearF := member{"f1", map[string]string{"dc": "a"}}
	nearer := member{"f0", map[string]string{"dc": "a", "rack": "1"}}
	farF := member{"f2", map[string]string{"dc": "b"}}
	for _, c := range []struct {
		name    string
		members []member
		leader  string
		want    map[string]bool // the members it may pick
	}{
		{"a follower as near as the leader", []member{lead, nearF, farF}, "lead", map[string]bool{"f1": true}},
		{"the nearest, whatever the rest", []member{farF, lead, nearer, nearF}, "lead", map[string]bool{"f0": true}},
		{"the leader nearer than every follower", []member{farF, lead}, "lead", map[string]bool{"lead": true}},
		{"the leader alone", []member{lead}, "lead", map[string]bool{"lead": true}},
		{"no leader known", []member{lead, nearF, farF}, "", map[string]bool{"lead": true, "f1": true}},
	} {
		var isLeader func(member) bool
		if c.leader != "" {
			isLeader = func(m member) bool { return m.addr == c.leader }
		}
		seen := map[string]bool{}
		for range 200 {
			m, ok := Nearest(self, c.members, func(m member) map[string]string { return m.domain }, isLeader, nil)
			if !ok || !c.want[m.addr] {
				t.Fatalf("%s: picked %q (%v), want one of %v", c.name, m.addr, ok, c.want)
			}
			seen[m.addr] = true
		}
		if len(seen) != len(c.want) {
			t.Errorf("%s: picked %v in 200 draws, want each of %v (at random among equals)", c.name, seen, c.want)
		}
	}
	if _, ok := Nearest(self, nil, func(m member) map[string]string { return m.domain }, nil, nil); ok {
		t.Error("a member picked from none")
	}
	// A member down is passed over, even the nearest, unless all are.
	down := func(m member) bool { return m.addr == "f0" || m.addr == "f1" }
	for range 100 {
		if m, _ := Nearest(self, []member{nearer, nearF, farF}, func(m member) map[string]string { return m.domain }, nil, down); m.addr != "f2" {
			t.Fatalf("picked %q, down; want f2, the one up", m.addr)
		}
	}
	if m, ok := Nearest(self, []member{nearer, nearF}, func(m member) map[string]string { return m.domain }, nil, down); !ok || m.addr != "f0" {
		t.Fatalf("every member down: picked %q (%v), want the nearest, f0", m.addr, ok)
	}
}
