package cluster

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/multiraft"
)

// Metrics are the instance's Prometheus metrics. Gauges of raft and grades
// are read from the node at scrape time.
type Metrics struct {
	node          func() *Node
	governorSteps *prometheus.CounterVec
	governorTime  *prometheus.HistogramVec
	persistTime   *prometheus.HistogramVec
	persistBytes  prometheus.Histogram
	applyTime     *prometheus.HistogramVec
}

// NewMetrics registers the cluster metrics on reg; node returns the running
// node (nil before it exists).
func NewMetrics(reg prometheus.Registerer, node func() *Node) *Metrics {
	m := &Metrics{
		node: node,
		governorSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_governor_activities_total",
			Help: "Governor activities run on this instance while it led group 0, by step and outcome.",
		}, []string{"step", "outcome"}),
		governorTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardkit_governor_step_seconds",
			Help:    "Duration of one governor activity, by step.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"step"}),
		persistTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardkit_raft_persist_seconds",
			Help:    "Duration of one raft round's write of new entries and hard states to disk (one Pebble commit for every group of the round; sync=\"true\": with an fsync, the one a write's latency waits for).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"sync"}),
		persistBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shardkit_raft_persist_bytes",
			Help:    "Size of one raft round's write to disk (entries and hard states of every group of the round).",
			Buckets: prometheus.ExponentialBuckets(256, 4, 10),
		}),
		applyTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardkit_raft_apply_seconds",
			Help:    "Duration of one application of a group's committed entries to its state machine (a round applies each group's in one or two goes; a write waits for every entry before it).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"group"}),
	}
	reg.MustRegister(m.governorSteps, m.governorTime, m.persistTime, m.persistBytes, m.applyTime, &collector{m: m})
	return m
}

var _ multiraft.RoundObserver = (*Metrics)(nil)

// ObservePersist implements multiraft.RoundObserver.
func (m *Metrics) ObservePersist(d time.Duration, synced bool, bytes int) {
	m.persistTime.WithLabelValues(strconv.FormatBool(synced)).Observe(d.Seconds())
	m.persistBytes.Observe(float64(bytes))
}

// ObserveApply implements multiraft.RoundObserver.
func (m *Metrics) ObserveApply(g multiraft.GroupID, d time.Duration) {
	m.applyTime.WithLabelValues(groupLabel(g)).Observe(d.Seconds())
}

func (m *Metrics) governorStep(step string, took time.Duration, err error) {
	outcome := "done"
	switch {
	case errors.Is(err, errWaiting):
		outcome = "waiting"
	case err != nil:
		outcome = "failed"
	}
	m.governorSteps.WithLabelValues(step, outcome).Inc()
	m.governorTime.WithLabelValues(step).Observe(took.Seconds())
}

var (
	descTerm    = prometheus.NewDesc("shardkit_raft_term", "Raft term of a group on this instance.", []string{"group"}, nil)
	descRole    = prometheus.NewDesc("shardkit_raft_role", "1 for this instance's raft role in a group.", []string{"group", "role"}, nil)
	descCommit  = prometheus.NewDesc("shardkit_raft_commit_index", "Raft commit index of a group on this instance.", []string{"group"}, nil)
	descApplied = prometheus.NewDesc("shardkit_raft_applied_index", "Raft applied index of a group on this instance.", []string{"group"}, nil)
	descGrades  = prometheus.NewDesc("shardkit_instances", "Instances of the cluster by current grade.", []string{"grade"}, nil)
	descIndexes = prometheus.NewDesc("shardkit_raft_read_indexes_total", "Read index rounds this instance asked raft for in a group (since the group was opened here).", []string{"group"}, nil)
	descLeased  = prometheus.NewDesc("shardkit_raft_lease_reads_total", "Linearizable reads this instance answered under its leader lease in a group, with no read index round (since the group was opened here).", []string{"group"}, nil)
	descLease   = prometheus.NewDesc("shardkit_raft_lease_remaining_seconds", "What is left of this instance's leader lease in a group (0: none).", []string{"group"}, nil)
	descBatches = prometheus.NewDesc("shardkit_raft_proposal_batches_total", "Batches of proposals this instance handed raft in a group: appended as one on a leader, forwarded as one by a follower (since the group was opened here).", []string{"group"}, nil)
	descProps   = prometheus.NewDesc("shardkit_raft_proposals_total", "Proposals this instance handed raft in a group, in those batches (since the group was opened here).", []string{"group"}, nil)
)

type collector struct{ m *Metrics }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTerm, descRole, descCommit, descApplied, descGrades, descIndexes, descLeased, descLease, descBatches, descProps} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	n := c.m.node()
	if n == nil {
		return
	}
	emit := func(gid multiraft.GroupID, g *multiraft.Group) {
		st := g.Status()
		label := groupLabel(gid)
		ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(st.Term), label)
		ch <- prometheus.MustNewConstMetric(descRole, prometheus.GaugeValue, 1, label, st.Role)
		ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(st.Commit), label)
		ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(st.Applied), label)
		ch <- prometheus.MustNewConstMetric(descIndexes, prometheus.CounterValue, float64(st.ReadIndexes), label)
		ch <- prometheus.MustNewConstMetric(descLeased, prometheus.CounterValue, float64(st.LeaseReads), label)
		ch <- prometheus.MustNewConstMetric(descLease, prometheus.GaugeValue, st.LeaseRemaining.Seconds(), label)
		ch <- prometheus.MustNewConstMetric(descBatches, prometheus.CounterValue, float64(st.ProposalBatches), label)
		ch <- prometheus.MustNewConstMetric(descProps, prometheus.CounterValue, float64(st.Proposals), label)
	}
	if g := n.g0.Load(); g != nil {
		emit(GroupMeta, g)
	}
	n.mu.Lock()
	groups := make(map[multiraft.GroupID]*multiraft.Group, len(n.rsGroups))
	for k, v := range n.rsGroups {
		groups[k] = v
	}
	n.mu.Unlock()
	for gid, g := range groups {
		emit(gid, g)
	}
	counts := map[string]int{}
	for _, v := range []string{"Offline", "RaftSynced", "Replicated", "ShardingInitialized", "Online", "Expelled"} {
		counts[v] = 0
	}
	for _, inst := range n.meta.State().Instances {
		counts[meta.VariantName(inst.GetCurrentGrade().GetVariant())]++
	}
	for g, c := range counts {
		ch <- prometheus.MustNewConstMetric(descGrades, prometheus.GaugeValue, float64(c), g)
	}
}

func groupLabel(g multiraft.GroupID) string {
	if g == GroupMeta {
		return "meta"
	}
	return "rs-" + strconv.FormatUint(uint64(g), 10)
}
