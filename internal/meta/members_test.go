package meta

import (
	"slices"
	"testing"

	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// GroupMembers keeps an instance being expelled (it may still lead its
// replicaset's group); Members does not; neither keeps one expelled.
func TestGroupMembersKeepsInstancesBeingExpelled(t *testing.T) {
	st := emptyState()
	for i, g := range []struct{ cur, target metapb.GradeVariant }{
		{Online, Online},     // i1
		{Online, Expelled},   // i2: being expelled
		{Expelled, Expelled}, // i3: expelled
		{Offline, Online},    // i4
	} {
		id := string(rune('1' + i))
		st.Instances["i"+id] = &metapb.Instance{InstanceId: "i" + id, RaftId: uint64(i + 1), ReplicasetId: "r1",
			CurrentGrade: &metapb.Grade{Variant: g.cur}, TargetGrade: &metapb.Grade{Variant: g.target}}
	}
	st.Instances["i9"] = &metapb.Instance{InstanceId: "i9", RaftId: 9, ReplicasetId: "r2", CurrentGrade: &metapb.Grade{Variant: Online}}
	ids := func(insts []*metapb.Instance) []string {
		var out []string
		for _, i := range insts {
			out = append(out, i.GetInstanceId())
		}
		return out
	}
	if got := ids(st.GroupMembers("r1")); !slices.Equal(got, []string{"i1", "i2", "i4"}) {
		t.Errorf("GroupMembers(r1) = %v, want [i1 i2 i4]", got)
	}
	if got := ids(st.Members("r1")); !slices.Equal(got, []string{"i1", "i4"}) {
		t.Errorf("Members(r1) = %v, want [i1 i4]", got)
	}
}
