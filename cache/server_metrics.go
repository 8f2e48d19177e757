package cache

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	resultOK         = "ok"
	resultPing       = "ping"
	resultWrongShard = "wrong_shard"
	resultNoLease    = "no_lease"
	resultBadRequest = "bad_request"
	resultError      = "error"
)

// ServerMetrics count a Handler's requests. A nil *ServerMetrics counts
// nothing.
type ServerMetrics struct {
	requests *prometheus.CounterVec
	latency  prometheus.Histogram
}

// NewServerMetrics registers the server metrics on reg.
func NewServerMetrics(reg prometheus.Registerer) *ServerMetrics {
	m := &ServerMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_server_requests_total",
			Help: "Get requests answered by result: ok, ping (empty Get), wrong_shard, no_lease, bad_request, error.",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shardkit_cache_server_latency_seconds",
			Help:    "Time to answer a Get on the server.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency)
	}
	return m
}

func (m *ServerMetrics) observe(result string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(result).Inc()
	m.latency.Observe(d.Seconds())
}
