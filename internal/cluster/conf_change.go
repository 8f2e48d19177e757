package cluster

import (
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/meta/metapb"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// planConfChange is governor step 1: the change, if any, that brings group
// 0's voters and learners to what they should be.
//
//   - An instance whose current grade is Expelled leaves the group.
//   - Every other instance is at least a learner.
//   - There are as many voters as the largest odd number not above
//     min(instances not expelled, 5). Only an instance that is Online
//     (current and target) is promoted; among several, the one that adds
//     the most failure-domain values not yet among the voters.
//   - A voter whose target is Offline or Expelled becomes a learner when a
//     replacement is there or the voters are in excess; the leader itself is
//     never demoted here (step 2 hands leadership over first).
//
// It returns nil while a joint configuration is being left, or when there
// is nothing to change.
func planConfChange(st *meta.State, gs multiraft.Status) *raftpb.ConfChangeV2 {
	if len(gs.VotersOutgoing) > 0 {
		return nil
	}
	self := uint64(gs.Node)
	var changes []*raftpb.ConfChangeSingle
	add := func(t raftpb.ConfChangeType, id uint64) {
		changes = append(changes, &raftpb.ConfChangeSingle{Type: t.Enum(), NodeId: new(id)})
	}
	isVoter := func(id uint64) bool { return containsNode(gs.Voters, id) }
	isMember := func(id uint64) bool { return isVoter(id) || containsNode(gs.Learners, id) }

	insts := st.SortedInstances()
	eligible := 0
	var stay, leaving, candidates []*metapb.Instance
	selfLeaving := false
	var selfInst *metapb.Instance
	for _, inst := range insts {
		id := inst.GetRaftId()
		cur, tgt := inst.GetCurrentGrade().GetVariant(), inst.GetTargetGrade().GetVariant()
		if cur == meta.Expelled {
			if isMember(id) && id != self {
				add(raftpb.ConfChangeType_ConfChangeRemoveNode, id)
			}
			continue
		}
		if tgt != meta.Expelled {
			eligible++
		}
		switch {
		case id == self:
			selfLeaving = tgt != meta.Online
			selfInst = inst
		case !isMember(id):
			add(raftpb.ConfChangeType_ConfChangeAddLearnerNode, id)
		case isVoter(id) && tgt == meta.Online:
			stay = append(stay, inst)
		case isVoter(id):
			leaving = append(leaving, inst)
		case cur == meta.Online && tgt == meta.Online:
			candidates = append(candidates, inst)
		}
	}
	want := largestOdd(min(eligible, 5))

	// The leader is a voter until it hands leadership over. If it is
	// leaving, the others must make up the voters without it, so that it
	// has a successor to hand over to.
	voters := slices.Clone(stay)
	if selfInst != nil && !selfLeaving {
		voters = append(voters, selfInst)
	}
	for len(voters) < want && len(candidates) > 0 {
		best := pickBySpread(voters, candidates)
		voters = append(voters, candidates[best])
		add(raftpb.ConfChangeType_ConfChangeAddNode, candidates[best].GetRaftId())
		candidates = slices.Delete(candidates, best, best+1)
	}
	// Leaving voters go once the voters are enough without them; an
	// expelled one goes in any case.
	for _, inst := range leaving {
		if len(voters) >= want || inst.GetTargetGrade().GetVariant() == meta.Expelled {
			add(raftpb.ConfChangeType_ConfChangeAddLearnerNode, inst.GetRaftId())
		} else {
			voters = append(voters, inst)
		}
	}
	// Too many voters (the cluster shrank): demote the most redundant ones.
	// (A leaving leader is not counted in voters; it is demoted by the next
	// leader.)
	for len(voters) > want {
		worst := -1
		for i, v := range voters {
			if v.GetRaftId() == self {
				continue
			}
			if worst < 0 || redundancy(voters, i) > redundancy(voters, worst) {
				worst = i
			}
		}
		if worst < 0 {
			break
		}
		add(raftpb.ConfChangeType_ConfChangeAddLearnerNode, voters[worst].GetRaftId())
		voters = slices.Delete(voters, worst, worst+1)
	}
	if len(changes) == 0 {
		return nil
	}
	return &raftpb.ConfChangeV2{Changes: changes}
}

// pickBySpread returns the index of the candidate that adds the most
// failure-domain values not present among the voters (ties: the first,
// which has the lowest raft id).
func pickBySpread(voters, candidates []*metapb.Instance) int {
	have := map[string]bool{}
	for _, v := range voters {
		for k, val := range v.GetFailureDomain() {
			have[k+"="+val] = true
		}
	}
	best, bestScore := 0, -1
	for i, c := range candidates {
		score := 0
		for k, val := range c.GetFailureDomain() {
			if !have[k+"="+val] {
				score++
			}
		}
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	return best
}

// redundancy counts how many of voter i's failure-domain values other
// voters share.
func redundancy(voters []*metapb.Instance, i int) int {
	r := 0
	for j, other := range voters {
		if j == i {
			continue
		}
		for k, val := range voters[i].GetFailureDomain() {
			if other.GetFailureDomain()[k] == val {
				r++
			}
		}
	}
	return r
}
