package cluster

import (
	"context"
	"slices"
	"sync"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/multiraft"
	"github.com/shardkit/shardkit/sharding"
)

// GetStatus implements clusterv1.ClusterServiceServer. It first catches up with the
// leader (a read index); without a leader it answers from what it has,
// and says so: Quorum tells how many voters of group 0 answer a probe.
func (s *Service) GetStatus(ctx context.Context, req *clusterv1.GetStatusRequest) (*clusterv1.GetStatusResponse, error) {
	n := s.n
	g0 := n.g0.Load()
	if g0 == nil {
		return nil, n.errNotRunning()
	}
	// The read index, the replicasets' bucket counts and the probe of the
	// voters run together, each bounded by Probe, so that an instance
	// without a quorum answers within one Probe, not three: a CLI gives
	// each --peer address its share of --timeout. The probe is needed
	// only without a quorum, and is cancelled as soon as the read index
	// confirms one.
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.Probe)
	defer cancel()
	pctx, cancelProbe := context.WithCancel(ctx)
	var (
		wg                sync.WaitGroup
		counts            map[string]int
		answering, silent []uint64
	)
	if n.cfg.BucketCounts != nil {
		wg.Go(func() { counts = n.cfg.BucketCounts(ctx) })
	}
	voters := groupVoters(g0.Status())
	wg.Go(func() { answering, silent = n.probeVoters(pctx, voters) })
	readErr := g0.ReadIndex(ctx)
	if readErr == nil {
		cancelProbe()
	}
	wg.Wait()
	cancelProbe()
	gs := g0.Status()
	resp := BuildStatus(n.meta.State(), gs, req.GetAll())
	for _, rs := range resp.GetReplicasets() {
		if c, ok := counts[rs.GetReplicaset().GetReplicasetId()]; ok {
			rs.BucketCount = uint32(c)
			rs.BucketsFromReplicaset = true
		}
	}
	q := &clusterv1.QuorumStatus{HasQuorum: readErr == nil, Voters: groupVoters(gs)}
	if !q.HasQuorum {
		q.Voters, q.VotersAnswering, q.VotersNotAnswering = voters, answering, silent
	}
	resp.Quorum = q
	resp.Security = "plaintext"
	if n.cfg.Credentials != nil {
		resp.Security = "mutual TLS"
	}
	return resp, nil
}

// groupVoters lists the voters of a group, both sides of a joint
// configuration, sorted.
func groupVoters(gs multiraft.Status) []uint64 {
	var out []uint64
	for _, v := range append(slices.Clone(gs.Voters), gs.VotersOutgoing...) {
		if !slices.Contains(out, uint64(v)) {
			out = append(out, uint64(v))
		}
	}
	slices.Sort(out)
	return out
}

// probeVoters asks each voter (at its address in group 0) for its
// progress, at once, each bounded by Probe; it returns those that answered
// (this instance counts as answering) and those that did not.
func (n *Node) probeVoters(ctx context.Context, voters []uint64) (answering, silent []uint64) {
	self := uint64(0)
	if id := n.Identity(); id != nil {
		self = id.RaftID
	}
	ok := make([]bool, len(voters))
	var wg sync.WaitGroup
	for i, v := range voters {
		if v == self {
			ok[i] = true
			continue
		}
		wg.Go(func() {
			addr, err := n.res.RaftAddress(multiraft.NodeID(v))
			if err != nil {
				return
			}
			c, err := n.peers.client(addr)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, n.cfg.Timeouts.Probe)
			defer cancel()
			_, err = c.GetProgress(pctx, &clusterv1.GetProgressRequest{})
			ok[i] = err == nil
		})
	}
	wg.Wait()
	for i, v := range voters {
		if ok[i] {
			answering = append(answering, v)
		} else {
			silent = append(silent, v)
		}
	}
	return answering, silent
}

// BuildStatus describes the cluster from group 0's state and this
// member's view of group 0.
func BuildStatus(st *meta.State, gs multiraft.Status, all bool) *clusterv1.GetStatusResponse {
	resp := &clusterv1.GetStatusResponse{
		ClusterId:    st.Props.GetClusterId(),
		ClusterUuid:  st.Props.GetClusterUuid(),
		LeaderRaftId: uint64(gs.Leader),
		Term:         gs.Term,
		CommitIndex:  gs.Commit,
		Properties:   apiProperties(st.Props),
	}
	for _, v := range gs.Voters {
		resp.Voters = append(resp.Voters, uint64(v))
	}
	for _, l := range gs.Learners {
		resp.Learners = append(resp.Learners, uint64(l))
	}
	for _, inst := range st.SortedInstances() {
		if !all && inst.GetCurrentGrade().GetVariant() == meta.Expelled {
			continue
		}
		role := "none"
		switch id := multiraft.NodeID(inst.GetRaftId()); {
		case slices.Contains(gs.Voters, id) || slices.Contains(gs.VotersOutgoing, id):
			role = "voter"
		case slices.Contains(gs.Learners, id):
			role = "learner"
		}
		resp.Instances = append(resp.Instances, &clusterv1.InstanceStatus{Instance: apiInstance(inst), RaftRole: role})
	}
	counts := st.BucketCounts()
	targets := sharding.Targets(st.BalanceGroups(), int(st.Props.GetBucketCount()))
	for _, rs := range st.SortedReplicasets() {
		if !all && rs.GetExpelled() {
			continue
		}
		rss := &clusterv1.ReplicasetStatus{
			Replicaset:        apiReplicaset(rs),
			BucketCount:       uint32(counts[rs.GetReplicasetId()]),
			TargetBucketCount: uint32(targets[rs.GetReplicasetId()]),
		}
		for _, m := range st.Members(rs.GetReplicasetId()) {
			rss.Instances = append(rss.Instances, m.GetInstanceId())
		}
		resp.Replicasets = append(resp.Replicasets, rss)
	}
	return resp
}
