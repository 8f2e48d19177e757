package lease

import (
	"github.com/prometheus/client_golang/prometheus"
)

// keeperMetrics are the lease-state metrics of one Keeper. With a nil
// Registerer they are kept but never exported.
type keeperMetrics struct {
	held   prometheus.Gauge
	epoch  prometheus.Gauge
	shard  prometheus.Gauge
	claims *prometheus.CounterVec
	pings  *prometheus.CounterVec
	lost   prometheus.Counter
}

func newKeeperMetrics(reg prometheus.Registerer) *keeperMetrics {
	m := &keeperMetrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardkit_cache_lease_held",
			Help: "1 while this server holds a valid shard lease, else 0.",
		}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardkit_cache_lease_epoch",
			Help: "Epoch (fencing number) of the shard lease this server claimed.",
		}),
		shard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "shardkit_cache_lease_shard",
			Help: "Shard number of the lease this server claimed (-1 before a claim).",
		}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_lease_claims_total",
			Help: "Shard lease claim attempts by result (ok, retry).",
		}, []string{"result"}),
		pings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_lease_pings_total",
			Help: "Shard lease pings by result (ok, error).",
		}, []string{"result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardkit_cache_lease_lost_total",
			Help: "Shard leases lost (expired or taken by another host).",
		}),
	}
	m.shard.Set(-1)
	if reg != nil {
		reg.MustRegister(m.held, m.epoch, m.shard, m.claims, m.pings, m.lost)
	}
	return m
}

func (m *keeperMetrics) claimed(l Lease) {
	m.held.Set(1)
	m.epoch.Set(float64(l.Epoch))
	m.shard.Set(float64(l.Shard))
	m.claims.WithLabelValues("ok").Inc()
}

func (m *keeperMetrics) claimFailed() { m.claims.WithLabelValues("retry").Inc() }

func (m *keeperMetrics) pinged(ok bool) {
	if ok {
		m.pings.WithLabelValues("ok").Inc()
		return
	}
	m.pings.WithLabelValues("error").Inc()
}

func (m *keeperMetrics) lostLease() {
	m.held.Set(0)
	m.lost.Inc()
}

func (m *keeperMetrics) released() { m.held.Set(0) }
