package mover

import (
	"fmt"
	"testing"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// A replicaset is available to moves while a majority of its voters are
// Online; a member on its first start is not counted as a voter.
func TestAvailableNeedsAMajorityOfVoters(t *testing.T) {
	online := func() *metapb.Instance {
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 1}, TargetGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 1}}
	}
	down := func() *metapb.Instance { // a voter that stopped
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Offline, Incarnation: 1}, TargetGrade: &metapb.Grade{Variant: meta.Offline, Incarnation: 1}}
	}
	restarting := func() *metapb.Instance { // a voter on its way back
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Offline, Incarnation: 1}, TargetGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 2}}
	}
	joining := func() *metapb.Instance { // never got past joining
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Offline}, TargetGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 1}}
	}
	firstStart := func() *metapb.Instance { // on its way through its first start
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Replicated, Incarnation: 1}, TargetGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 1}}
	}
	comingBack := func() *metapb.Instance { // a voter on its way back from a stop
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Replicated, Incarnation: 2}, TargetGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 2}}
	}
	stopping := func() *metapb.Instance { // Online, but meant to go Offline
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Online, Incarnation: 1}, TargetGrade: &metapb.Grade{Variant: meta.Offline, Incarnation: 1}}
	}
	leaving := func() *metapb.Instance { // being expelled, still in the raft group, down
		return &metapb.Instance{CurrentGrade: &metapb.Grade{Variant: meta.Offline, Incarnation: 1}, TargetGrade: &metapb.Grade{Variant: meta.Expelled, Incarnation: 1}}
	}
	for _, c := range []struct {
		name    string
		members []func() *metapb.Instance
		want    bool
	}{
		{"replication factor 1, up", []func() *metapb.Instance{online}, true},
		{"replication factor 1, down", []func() *metapb.Instance{down}, false},
		{"3 of 3", []func() *metapb.Instance{online, online, online}, true},
		{"2 of 3", []func() *metapb.Instance{online, online, down}, true},
		{"1 of 3", []func() *metapb.Instance{online, down, restarting}, false},
		{"1 of 2", []func() *metapb.Instance{online, down}, false},
		{"one stopping of 3, one down", []func() *metapb.Instance{online, stopping, down}, false},
		{"a new replicaset's first member, two joining", []func() *metapb.Instance{online, joining, joining}, true},
		{"2 of 3 voters and a replacement joining", []func() *metapb.Instance{online, online, down, joining}, true},
		{"a new replicaset's first member, two on their first start", []func() *metapb.Instance{online, firstStart, firstStart}, true},
		{"1 of 3, two coming back from a stop", []func() *metapb.Instance{online, comingBack, comingBack}, false},
		{"2 of 3, one coming back", []func() *metapb.Instance{online, online, comingBack}, true},
		{"1 of 2, the other down and being expelled", []func() *metapb.Instance{online, leaving}, false},
		{"2 of 3, one down and being expelled", []func() *metapb.Instance{online, online, leaving}, true},
		{"none", nil, false},
	} {
		st := &meta.State{Instances: map[string]*metapb.Instance{}}
		for i, mk := range c.members {
			m := mk()
			m.InstanceId, m.RaftId, m.ReplicasetId = fmt.Sprintf("i%d", i+1), uint64(i+1), "r1"
			st.Instances[m.InstanceId] = m
		}
		if got := available(st, "r1"); got != c.want {
			t.Errorf("%s: available %v, want %v", c.name, got, c.want)
		}
	}
}
