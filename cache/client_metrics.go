package cache

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	kindGet   = "get"
	kindHedge = "hedge"
	kindRetry = "retry"
	kindPing  = "ping"

	useUsed       = "used"
	useWasted     = "wasted"
	useWrongShard = "wrong_shard"
	useError      = "error"
	useCancelled  = "cancelled"
)

// clientMetrics are the client's Prometheus metrics; with a nil Registerer
// they are kept but never exported.
type clientMetrics struct {
	requests      *prometheus.CounterVec
	answers       *prometheus.CounterVec
	hostLatency   *prometheus.HistogramVec
	epochChanges  *prometheus.CounterVec
	ejections     *prometheus.CounterVec
	gets          *prometheus.CounterVec
	getLatency    prometheus.Histogram
	logical       prometheus.Counter
	resolveErrors prometheus.Counter
}

func newClientMetrics(reg prometheus.Registerer) *clientMetrics {
	m := &clientMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_client_requests_total",
			Help: "Requests sent to cache servers by kind: get (first), hedge, retry, ping.",
		}, []string{"dc", "host", "kind"}),
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_client_answers_total",
			Help: "Outcomes of Get requests: used (gave keys), wasted (keys already in), wrong_shard, error, cancelled (Get done first).",
		}, []string{"dc", "host", "use"}),
		hostLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "shardkit_cache_client_host_latency_seconds",
			Help:    "Latency of successful requests per host.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"dc", "host"}),
		epochChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_client_shard_epoch_changes_total",
			Help: "Times the client learned a newer lease epoch for a shard of a datacenter.",
		}, []string{"dc"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_client_ejections_total",
			Help: "Hosts taken out of Gets after consecutive failures.",
		}, []string{"dc", "host"}),
		gets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shardkit_cache_client_gets_total",
			Help: "Get calls by result: ok, missing (some keys without an answer).",
		}, []string{"result"}),
		getLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "shardkit_cache_client_get_latency_seconds",
			Help:    "Latency of Get calls.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		logical: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardkit_cache_client_logical_shard_requests_total",
			Help: "Shards (distinct key ranges) asked by Gets: the denominator of server requests per logical request.",
		}),
		resolveErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shardkit_cache_client_resolve_errors_total",
			Help: "Failed refreshes of the host list.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.answers, m.hostLatency, m.epochChanges, m.ejections, m.gets, m.getLatency, m.logical, m.resolveErrors)
	}
	return m
}

func (m *clientMetrics) request(ep Endpoint, kind string) {
	m.requests.WithLabelValues(ep.DC, ep.Addr, kind).Inc()
}

func (m *clientMetrics) answer(ep Endpoint, use string) {
	m.answers.WithLabelValues(ep.DC, ep.Addr, use).Inc()
}

func (m *clientMetrics) latency(ep Endpoint, d time.Duration) {
	m.hostLatency.WithLabelValues(ep.DC, ep.Addr).Observe(d.Seconds())
}

func (m *clientMetrics) forgetHost(ep Endpoint) {
	l := prometheus.Labels{"host": ep.Addr}
	m.requests.DeletePartialMatch(l)
	m.answers.DeletePartialMatch(l)
	m.hostLatency.DeletePartialMatch(l)
	m.ejections.DeletePartialMatch(l)
}
