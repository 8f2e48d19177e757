package statusview

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/client"
)

// View is the JSON form of the cluster's status: `shardkit status --format
// json` and the HTTP endpoint /api/v1/cluster print it. Scripts rely on these
// names and types: fields are only ever added after the ones the issue
// fixed, never renamed or retyped. Instances are sorted by raft_id,
// replicasets by replicaset_id; lists and maps are never null.
type View struct {
	ClusterID    string       `json:"cluster_id"`
	ClusterUUID  string       `json:"cluster_uuid"`
	LeaderRaftID uint64       `json:"leader_raft_id"`
	Term         uint64       `json:"term"`
	CommitIndex  uint64       `json:"commit_index"`
	Instances    []Instance   `json:"instances"`
	Replicasets  []Replicaset `json:"replicasets"`

	// Additions.
	Voters            []uint64 `json:"voters"`
	Learners          []uint64 `json:"learners"`
	ReplicationFactor uint32   `json:"replication_factor"`
	BucketCount       uint32   `json:"bucket_count"`
	ShardingVersion   uint64   `json:"sharding_version"`
	// Quorum says whether group 0 can decide now; without a quorum the
	// grades are the last known (GradesLastKnown).
	Quorum          Quorum `json:"quorum"`
	GradesLastKnown bool   `json:"grades_last_known"`
	// Security is how the answering instance's port is secured: "mutual
	// TLS" or "plaintext" ("" from older instances).
	Security string `json:"security"`

	hasQuorumField bool // the answer said whether group 0 has a quorum
}

// Quorum is whether group 0 has a quorum, as the answering instance found
// out: it caught up with a leader, or (when it could not) which voters
// answer a probe. Lists are raft ids, never null.
type Quorum struct {
	HasQuorum          bool     `json:"has_quorum"`
	Voters             []uint64 `json:"voters"`
	VotersAnswering    []uint64 `json:"voters_answering"`
	VotersNotAnswering []uint64 `json:"voters_not_answering"`
}

// NoQuorum reports whether the answer says group 0 has no quorum (an
// answer without the quorum's account, from an older instance, does not).
func (v View) NoQuorum() bool { return v.hasQuorumField && !v.Quorum.HasQuorum }

// QuorumSummary says it in words: "group 0 has no quorum: 1 of 3 voters
// answer (i1); i2, i3 do not" ("" when it has one).
func (v View) QuorumSummary() string {
	if !v.NoQuorum() {
		return ""
	}
	q := v.Quorum
	name := func(ids []uint64) string {
		var names []string
		for _, id := range ids {
			n := fmt.Sprintf("raft_id %d", id)
			for _, in := range v.Instances {
				if in.RaftID == id {
					n = in.InstanceID
				}
			}
			names = append(names, n)
		}
		return strings.Join(names, ", ")
	}
	majority := len(q.Voters)/2 + 1
	if len(q.VotersAnswering) >= majority {
		return fmt.Sprintf("group 0 did not confirm a leader in time, though %d of %d voters answer (an election?)",
			len(q.VotersAnswering), len(q.Voters))
	}
	out := fmt.Sprintf("group 0 has no quorum: %d of %d voters answer", len(q.VotersAnswering), len(q.Voters))
	if len(q.VotersAnswering) > 0 {
		out += " (" + name(q.VotersAnswering) + ")"
	}
	if len(q.VotersNotAnswering) > 0 {
		out += "; " + name(q.VotersNotAnswering) + " do not"
	}
	return out + fmt.Sprintf("; %d are needed", majority)
}

type Instance struct {
	InstanceID    string            `json:"instance_id"`
	RaftID        uint64            `json:"raft_id"`
	UUID          string            `json:"uuid"`
	ReplicasetID  string            `json:"replicaset_id"`
	Address       string            `json:"address"`
	FailureDomain map[string]string `json:"failure_domain"`
	RaftRole      string            `json:"raft_role"` // voter, learner or none
	CurrentGrade  Grade             `json:"current_grade"`
	TargetGrade   Grade             `json:"target_grade"`

	// Additions.
	ReplicasetUUID string `json:"replicaset_uuid"`
	HTTPAddress    string `json:"http_address"`
	TargetReason   string `json:"target_reason"`
	// TargetChangedAt is RFC 3339 in UTC with milliseconds; "" if unknown.
	TargetChangedAt string `json:"target_changed_at"`
	// CommitIndex is the group-0 index that last wrote the record.
	CommitIndex uint64 `json:"commit_index"`
}

type Grade struct {
	Variant     string `json:"variant"`
	Incarnation uint64 `json:"incarnation"`
}

type Replicaset struct {
	ReplicasetID     string   `json:"replicaset_id"`
	UUID             string   `json:"uuid"`
	LeaderInstanceID string   `json:"leader_instance_id"`
	Weight           uint32   `json:"weight"`
	Instances        []string `json:"instances"`
	BucketCount      uint32   `json:"bucket_count"`

	// Additions.
	TargetBucketCount uint32 `json:"target_bucket_count"`
	RaftGroupID       uint64 `json:"raft_group_id"`
	Expelled          bool   `json:"expelled"`
}

func gradeFromProto(g *clusterv1.Grade) Grade {
	return Grade{Variant: client.GradeName(g.GetVariant()), Incarnation: g.GetIncarnation()}
}

// FromProto converts the answer, keeping expelled instances and
// replicasets only when all (the server filters too; this is the backstop).
func FromProto(r *clusterv1.GetStatusResponse, all bool) View {
	voters, learners := sortedIDs(r.GetVoters()), sortedIDs(r.GetLearners())
	props := r.GetProperties()
	st := View{
		ClusterID:         r.GetClusterId(),
		ClusterUUID:       r.GetClusterUuid(),
		LeaderRaftID:      r.GetLeaderRaftId(),
		Term:              r.GetTerm(),
		CommitIndex:       r.GetCommitIndex(),
		Instances:         []Instance{},
		Replicasets:       []Replicaset{},
		Voters:            voters,
		Learners:          learners,
		ReplicationFactor: props.GetReplicationFactor(),
		BucketCount:       props.GetBucketCount(),
		ShardingVersion:   props.GetShardingVersion(),
		Security:          r.GetSecurity(),
		Quorum: Quorum{
			HasQuorum:          r.GetQuorum() == nil || r.GetQuorum().GetHasQuorum(),
			Voters:             sortedIDs(r.GetQuorum().GetVoters()),
			VotersAnswering:    sortedIDs(r.GetQuorum().GetVotersAnswering()),
			VotersNotAnswering: sortedIDs(r.GetQuorum().GetVotersNotAnswering()),
		},
		hasQuorumField: r.GetQuorum() != nil,
	}
	st.GradesLastKnown = st.NoQuorum()
	shown := map[string]uint64{} // instance_id -> raft_id of listed instances
	hidden := map[string]bool{}
	for _, is := range r.GetInstances() {
		in := is.GetInstance()
		if in == nil {
			continue
		}
		if !all && in.GetCurrentGrade().GetVariant() == clusterv1.GradeVariant_GRADE_VARIANT_EXPELLED {
			hidden[in.GetInstanceId()] = true
			continue
		}
		fd := map[string]string{}
		for k, v := range in.GetFailureDomain() {
			fd[k] = v
		}
		changed := ""
		if ms := in.GetTargetChangedUnixMs(); ms > 0 {
			changed = time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
		}
		shown[in.GetInstanceId()] = in.GetRaftId()
		st.Instances = append(st.Instances, Instance{
			InstanceID:      in.GetInstanceId(),
			RaftID:          in.GetRaftId(),
			UUID:            in.GetUuid(),
			ReplicasetID:    in.GetReplicasetId(),
			Address:         in.GetAddress(),
			FailureDomain:   fd,
			RaftRole:        raftRole(is.GetRaftRole(), in.GetRaftId(), voters, learners),
			CurrentGrade:    gradeFromProto(in.GetCurrentGrade()),
			TargetGrade:     gradeFromProto(in.GetTargetGrade()),
			ReplicasetUUID:  in.GetReplicasetUuid(),
			HTTPAddress:     in.GetHttpAddress(),
			TargetReason:    in.GetTargetReason(),
			TargetChangedAt: changed,
			CommitIndex:     in.GetCommitIndex(),
		})
	}
	slices.SortStableFunc(st.Instances, func(a, b Instance) int {
		return cmp.Or(cmp.Compare(a.RaftID, b.RaftID), cmp.Compare(a.InstanceID, b.InstanceID))
	})

	for _, rs := range r.GetReplicasets() {
		rep := rs.GetReplicaset()
		if rep == nil {
			continue
		}
		if !all && rep.GetExpelled() {
			continue
		}
		members := []string{}
		for _, id := range rs.GetInstances() {
			if !hidden[id] {
				members = append(members, id)
			}
		}
		slices.SortStableFunc(members, func(a, b string) int {
			ra, oka := shown[a]
			rb, okb := shown[b]
			switch {
			case oka && okb:
				return cmp.Or(cmp.Compare(ra, rb), cmp.Compare(a, b))
			case oka != okb: // listed instances first
				if oka {
					return -1
				}
				return 1
			}
			return cmp.Compare(a, b)
		})
		st.Replicasets = append(st.Replicasets, Replicaset{
			ReplicasetID:      rep.GetReplicasetId(),
			UUID:              rep.GetUuid(),
			LeaderInstanceID:  rep.GetLeaderInstanceId(),
			Weight:            rep.GetWeight(),
			Instances:         members,
			BucketCount:       rs.GetBucketCount(),
			TargetBucketCount: rs.GetTargetBucketCount(),
			RaftGroupID:       rep.GetRaftGroupId(),
			Expelled:          rep.GetExpelled(),
		})
	}
	slices.SortStableFunc(st.Replicasets, func(a, b Replicaset) int {
		return cmp.Compare(a.ReplicasetID, b.ReplicasetID)
	})
	return st
}

// raftRole is the server's role name when it is one of the three, else
// what the voter and learner lists say.
func raftRole(role string, raftID uint64, voters, learners []uint64) string {
	switch role {
	case "voter", "learner", "none":
		return role
	}
	switch {
	case slices.Contains(voters, raftID):
		return "voter"
	case slices.Contains(learners, raftID):
		return "learner"
	}
	return "none"
}

func sortedIDs(ids []uint64) []uint64 {
	out := append([]uint64{}, ids...)
	slices.Sort(out)
	return out
}
