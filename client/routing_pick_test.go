package client

import (
	"testing"

	datav1 "github.com/shardkit/shardkit/api/data/v1"
)

// An rw call goes to the leader while it answers; an ro call to a
// follower (the seed's eselect('ro') prefers read-only hosts), to the
// leader only when every follower just failed to answer; an rw call
// whose leader failed goes to a member that answers, which names the new
// leader.
func TestAnROCallGoesToAFollowerAndAnRWCallToTheLeader(t *testing.T) {
	c := &Client{}
	rt := newRouting(&datav1.GetRoutingResponse{BucketCount: 10,
		Buckets: []*datav1.BucketRange{{First: 1, Last: 10, ReplicasetId: "r1"}},
		Replicasets: []*datav1.ReplicasetRoute{{ReplicasetId: "r1", LeaderAddress: "lead:1", Members: []*datav1.Member{
			{InstanceId: "i1", Address: "lead:1"}, {InstanceId: "i2", Address: "f1:1"}, {InstanceId: "i3", Address: "f2:1"}, {InstanceId: "i4"}}}}})
	picks := func(rw bool) map[string]int {
		seen := map[string]int{}
		for range 200 {
			rs, addr := c.addressFor(rt, 3, rw)
			if rs != "r1" {
				t.Fatalf("bucket 3 routed to %q, want r1", rs)
			}
			seen[addr]++
		}
		return seen
	}
	if got := picks(true); len(got) != 1 || got["lead:1"] != 200 {
		t.Errorf("rw: %v, want the leader every time", got)
	}
	if got := picks(false); len(got) != 2 || got["f1:1"] == 0 || got["f2:1"] == 0 {
		t.Errorf("ro: %v, want both followers and never the leader or a member with no address", got)
	}
	c.rt.unreachable.Mark("f1:1")
	if got := picks(false); len(got) != 1 || got["f2:1"] != 200 {
		t.Errorf("ro, f1 down: %v, want f2 alone", got)
	}
	c.rt.unreachable.Mark("f2:1")
	if got := picks(false); len(got) != 1 || got["lead:1"] != 200 {
		t.Errorf("ro, both followers down: %v, want the leader", got)
	}
	c.rt.unreachable.Answered("f2:1")
	c.rt.unreachable.Mark("lead:1")
	if got := picks(true); len(got) != 1 || got["f2:1"] != 200 {
		t.Errorf("rw, the leader down: %v, want f2, the one member up", got)
	}
}
