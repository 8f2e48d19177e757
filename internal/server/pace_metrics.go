package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shardkit/shardkit/internal/replicaset"
)

// paceMetrics shows the pace of the copy of moved buckets into this
// instance's replicaset, which the copy sets by itself within the
// operator's --copy-rate (docs/design/moves.md, "A copy that yields by
// itself"), and the clients' write delay it is set from: read from the
// storage when scraped. It matters on the replicaset's leader, which
// copies.
type paceMetrics struct {
	storage func() *replicaset.Storage // nil before the replicaset opens
}

var (
	descPace = prometheus.NewDesc("shardkit_copy_pace_bytes_per_second",
		"The pace of the copy of moved buckets into this replicaset (bytes of tuples proposed per second), which the copy sets itself from the clients' write delay, within the rebalancer's copy rate.", []string{"replicaset"}, nil)
	descPaceDelay = prometheus.NewDesc("shardkit_copy_pace_write_delay_seconds",
		"The clients' writes' delay on this member, from proposal to result, the 90th percentile of the copy pace's last window (0 when it had too few writes to tell).", []string{"replicaset"}, nil)
	descPaceTarget = prometheus.NewDesc("shardkit_copy_pace_write_delay_target_seconds",
		"The write delay above which the copy pace's last window halved the pace: 1.5 times that of the writes that met no copy entry in the log.", []string{"replicaset"}, nil)
	descReceiveWindow = prometheus.NewDesc("shardkit_copy_receive_window_buckets",
		"How many buckets the copy into this replicaset takes at once at its pace: the rebalancer starts no more moves into it (0: no bound but the quotas).", []string{"replicaset"}, nil)
)

// Describe implements prometheus.Collector.
func (m *paceMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descPace
	ch <- descPaceDelay
	ch <- descPaceTarget
	ch <- descReceiveWindow
}

// Collect implements prometheus.Collector.
func (m *paceMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.storage()
	if s == nil {
		return
	}
	st := s.CopyPace()
	rs := s.ReplicasetID()
	ch <- prometheus.MustNewConstMetric(descPace, prometheus.GaugeValue, float64(st.BytesPerS), rs)
	ch <- prometheus.MustNewConstMetric(descPaceDelay, prometheus.GaugeValue, st.Signal.Seconds(), rs)
	ch <- prometheus.MustNewConstMetric(descPaceTarget, prometheus.GaugeValue, st.Target.Seconds(), rs)
	ch <- prometheus.MustNewConstMetric(descReceiveWindow, prometheus.GaugeValue, float64(st.ReceiveWindow), rs)
}
