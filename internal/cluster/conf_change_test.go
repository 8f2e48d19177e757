package cluster

import (
	"slices"
	"strconv"
	"testing"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
)

type instSpec struct {
	id       uint64
	cur, tgt metapb.GradeVariant
	dc       string
}

func stateOf(specs ...instSpec) *meta.State {
	st := &meta.State{Instances: map[string]*metapb.Instance{}}
	for _, s := range specs {
		inst := &metapb.Instance{
			InstanceId:   "i" + strconv.FormatUint(s.id, 10),
			RaftId:       s.id,
			CurrentGrade: &metapb.Grade{Variant: s.cur},
			TargetGrade:  &metapb.Grade{Variant: s.tgt},
		}
		if s.dc != "" {
			inst.FailureDomain = map[string]string{"dc": s.dc}
		}
		st.Instances[inst.InstanceId] = inst
	}
	return st
}

func ids(xs ...uint64) []multiraft.NodeID {
	out := make([]multiraft.NodeID, len(xs))
	for i, x := range xs {
		out[i] = multiraft.NodeID(x)
	}
	return out
}

// applyCC returns the voters and learners after a change.
func applyCC(gs multiraft.Status, cc *raftpb.ConfChangeV2) (voters, learners []uint64) {
	v, l := map[uint64]bool{}, map[uint64]bool{}
	for _, x := range gs.Voters {
		v[uint64(x)] = true
	}
	for _, x := range gs.Learners {
		l[uint64(x)] = true
	}
	if cc != nil {
		for _, c := range cc.GetChanges() {
			id := c.GetNodeId()
			switch c.GetType() {
			case raftpb.ConfChangeType_ConfChangeAddNode:
				v[id], l[id] = true, false
			case raftpb.ConfChangeType_ConfChangeAddLearnerNode:
				v[id], l[id] = false, true
			case raftpb.ConfChangeType_ConfChangeRemoveNode:
				v[id], l[id] = false, false
			}
		}
	}
	for id, ok := range v {
		if ok {
			voters = append(voters, id)
		}
	}
	for id, ok := range l {
		if ok {
			learners = append(learners, id)
		}
	}
	slices.Sort(voters)
	slices.Sort(learners)
	return voters, learners
}

func TestPlanConfChange(t *testing.T) {
	on, off, exp := meta.Online, meta.Offline, meta.Expelled
	for _, tc := range []struct {
		name                     string
		insts                    []instSpec
		voters, learners         []multiraft.NodeID
		wantVoters, wantLearners []uint64
	}{
		{
			name:       "a lone leader stays",
			insts:      []instSpec{{1, on, on, ""}},
			voters:     ids(1),
			wantVoters: []uint64{1},
		},
		{
			name:         "a joiner not yet Online is only a learner",
			insts:        []instSpec{{1, on, on, ""}, {2, off, on, ""}},
			voters:       ids(1),
			wantVoters:   []uint64{1},
			wantLearners: []uint64{2},
		},
		{
			name:         "two instances: one voter (largest odd not above 2)",
			insts:        []instSpec{{1, on, on, ""}, {2, on, on, ""}},
			voters:       ids(1),
			learners:     ids(2),
			wantVoters:   []uint64{1},
			wantLearners: []uint64{2},
		},
		{
			name:       "three Online: three voters",
			insts:      []instSpec{{1, on, on, ""}, {2, on, on, ""}, {3, on, on, ""}},
			voters:     ids(1),
			learners:   ids(2, 3),
			wantVoters: []uint64{1, 2, 3},
		},
		{
			name:         "at most five voters",
			insts:        []instSpec{{1, on, on, ""}, {2, on, on, ""}, {3, on, on, ""}, {4, on, on, ""}, {5, on, on, ""}, {6, on, on, ""}, {7, on, on, ""}},
			voters:       ids(1),
			learners:     ids(2, 3, 4, 5, 6, 7),
			wantVoters:   []uint64{1, 2, 3, 4, 5},
			wantLearners: []uint64{6, 7},
		},
		{
			name:         "an Offline voter is replaced by an Online learner",
			insts:        []instSpec{{1, on, on, ""}, {2, on, on, ""}, {3, on, off, ""}, {4, on, on, ""}},
			voters:       ids(1, 2, 3),
			learners:     ids(4),
			wantVoters:   []uint64{1, 2, 4},
			wantLearners: []uint64{3},
		},
		{
			name:       "an Offline voter without replacement stays",
			insts:      []instSpec{{1, on, on, ""}, {2, on, on, ""}, {3, off, off, ""}},
			voters:     ids(1, 2, 3),
			wantVoters: []uint64{1, 2, 3},
		},
		{
			name:       "a leaving leader stays a voter, and its replacement is promoted first",
			insts:      []instSpec{{1, on, off, ""}, {2, on, on, ""}, {3, on, on, ""}, {4, on, on, ""}},
			voters:     ids(1, 2, 3),
			learners:   ids(4),
			wantVoters: []uint64{1, 2, 3, 4},
		},
		{
			name:       "an expelled leader gets a successor even beyond the voter count",
			insts:      []instSpec{{1, on, exp, ""}, {2, on, on, ""}},
			voters:     ids(1),
			learners:   ids(2),
			wantVoters: []uint64{1, 2},
		},
		{
			name:         "an expelled-to-be voter becomes a learner, then a current Expelled leaves",
			insts:        []instSpec{{1, on, on, ""}, {2, on, on, ""}, {3, on, exp, ""}, {4, exp, exp, ""}},
			voters:       ids(1, 2, 3),
			learners:     ids(4),
			wantVoters:   []uint64{1},
			wantLearners: []uint64{2, 3},
		},
		{
			name:         "voters spread over failure domains",
			insts:        []instSpec{{1, on, on, "a"}, {2, on, on, "a"}, {3, on, on, "a"}, {4, on, on, "b"}, {5, on, on, "c"}},
			voters:       ids(1),
			learners:     ids(2, 3, 4, 5),
			wantVoters:   []uint64{1, 2, 3, 4, 5},
			wantLearners: nil,
		},
		{
			name:         "of three voters out of four, the spread ones",
			insts:        []instSpec{{1, on, on, "a"}, {2, on, on, "a"}, {3, on, on, "b"}, {4, on, on, "c"}},
			voters:       ids(1),
			learners:     ids(2, 3, 4),
			wantVoters:   []uint64{1, 3, 4},
			wantLearners: []uint64{2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := multiraft.Status{Node: 1, Voters: tc.voters, Learners: tc.learners}
			cc := planConfChange(stateOf(tc.insts...), gs)
			v, l := applyCC(gs, cc)
			if !slices.Equal(v, tc.wantVoters) || !slices.Equal(l, tc.wantLearners) {
				t.Fatalf("voters %v learners %v, want %v and %v (change %v)", v, l, tc.wantVoters, tc.wantLearners, cc)
			}
			// The plan is a fixed point: once applied, nothing more to change.
			after := multiraft.Status{Node: 1, Voters: ids(v...), Learners: ids(l...)}
			if again := planConfChange(stateOf(tc.insts...), after); again != nil {
				t.Fatalf("after the change, another one is planned: %v", again)
			}
		})
	}
}

func TestPlanConfChangeWaitsOutJointConfig(t *testing.T) {
	gs := multiraft.Status{Node: 1, Voters: ids(1, 2), VotersOutgoing: ids(1, 3)}
	if cc := planConfChange(stateOf(instSpec{1, meta.Online, meta.Online, ""}, instSpec{4, meta.Online, meta.Online, ""}), gs); cc != nil {
		t.Fatalf("planned %v during a joint configuration", cc)
	}
}
