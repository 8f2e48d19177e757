package cluster

import (
	"maps"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta/metapb"
)

// The edge between group 0's own records (internal/meta/metapb) and the
// public API (api/cluster/v1): the log's format does not follow the API's
// changes, so every record that leaves or enters through the API is
// converted here, field by field.

func apiVariant(v metapb.GradeVariant) clusterv1.GradeVariant { return clusterv1.GradeVariant(v) }

func metaVariant(v clusterv1.GradeVariant) metapb.GradeVariant { return metapb.GradeVariant(v) }

func apiGrade(g *metapb.Grade) *clusterv1.Grade {
	if g == nil {
		return nil
	}
	return &clusterv1.Grade{Variant: apiVariant(g.GetVariant()), Incarnation: g.GetIncarnation()}
}

func apiInstance(i *metapb.Instance) *clusterv1.Instance {
	if i == nil {
		return nil
	}
	return &clusterv1.Instance{
		InstanceId:          i.GetInstanceId(),
		RaftId:              i.GetRaftId(),
		Uuid:                i.GetUuid(),
		ReplicasetId:        i.GetReplicasetId(),
		ReplicasetUuid:      i.GetReplicasetUuid(),
		Address:             i.GetAddress(),
		FailureDomain:       maps.Clone(i.GetFailureDomain()),
		CurrentGrade:        apiGrade(i.GetCurrentGrade()),
		TargetGrade:         apiGrade(i.GetTargetGrade()),
		TargetReason:        i.GetTargetReason(),
		TargetChangedUnixMs: i.GetTargetChangedUnixMs(),
		CommitIndex:         i.GetCommitIndex(),
		HttpAddress:         i.GetHttpAddress(),
	}
}

func apiReplicaset(r *metapb.Replicaset) *clusterv1.Replicaset {
	if r == nil {
		return nil
	}
	return &clusterv1.Replicaset{
		ReplicasetId:        r.GetReplicasetId(),
		Uuid:                r.GetUuid(),
		RaftGroupId:         r.GetRaftGroupId(),
		Weight:              r.GetWeight(),
		LeaderInstanceId:    r.GetLeaderInstanceId(),
		BootstrapInstanceId: r.GetBootstrapInstanceId(),
		Expelled:            r.GetExpelled(),
	}
}

func apiProperties(p *metapb.ClusterProperties) *clusterv1.ClusterProperties {
	if p == nil {
		return nil
	}
	return &clusterv1.ClusterProperties{
		ClusterId:           p.GetClusterId(),
		ClusterUuid:         p.GetClusterUuid(),
		ReplicationFactor:   p.GetReplicationFactor(),
		BucketCount:         p.GetBucketCount(),
		ShardingVersion:     p.GetShardingVersion(),
		MaxRaftId:           p.GetMaxRaftId(),
		MaxReplicasetNumber: p.GetMaxReplicasetNumber(),
		MaxRaftGroupId:      p.GetMaxRaftGroupId(),
		FailureDomainKeys:   append([]string(nil), p.GetFailureDomainKeys()...),
		BucketsBootstrapped: p.GetBucketsBootstrapped(),
	}
}

func apiLease(l *metapb.Lease) *clusterv1.Lease {
	if l == nil {
		return nil
	}
	return &clusterv1.Lease{
		Name:          l.GetName(),
		Holder:        l.GetHolder(),
		Ticket:        l.GetTicket(),
		GrantedUnixMs: l.GetGrantedUnixMs(),
		ExpiresUnixMs: l.GetExpiresUnixMs(),
		Value:         l.GetValue(),
	}
}

func metaJoinRequest(r *clusterv1.RaftJoinRequest) *metapb.JoinRequest {
	return &metapb.JoinRequest{
		ClusterId:        r.GetClusterId(),
		InstanceId:       r.GetInstanceId(),
		ReplicasetId:     r.GetReplicasetId(),
		AdvertiseAddress: r.GetAdvertiseAddress(),
		FailureDomain:    maps.Clone(r.GetFailureDomain()),
		Uuid:             r.GetUuid(),
		HttpAddress:      r.GetHttpAddress(),
	}
}
