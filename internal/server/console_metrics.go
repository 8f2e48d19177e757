package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	datav1 "github.com/shardkit/shardkit/api/data/v1"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/statusview"
)

// metricSampler keeps the last minutes of this instance's own load, read
// from its Prometheus registry (no Prometheus server): writes/s, reads/s
// and the p99 latency of both, one sample per sampleEvery.
type metricSampler struct {
	gather prometheus.Gatherer
	every  time.Duration

	mu      sync.Mutex
	prev    *rpcTotals
	samples []metricSample
}

// metricSample is one interval's load.
type metricSample struct {
	// Time is the interval's end, in Unix milliseconds.
	Time         int64   `json:"t"`
	WritesPerSec float64 `json:"writes_per_s"`
	ReadsPerSec  float64 `json:"reads_per_s"`
	// P99Ms is the 99th percentile of the interval's writes and reads, in
	// milliseconds, as the histogram's bucket bounds allow (0: no call).
	P99Ms float64 `json:"p99_ms"`
}

const (
	sampleEvery = 2 * time.Second
	keepSamples = 150 // 5 minutes
)

// rpcTotals are the cumulative counts of the data calls served: writes,
// reads, and the latency histogram of both (upper bound -> count).
type rpcTotals struct {
	at      time.Time
	writes  uint64
	reads   uint64
	buckets map[float64]uint64
}

func newMetricSampler(g prometheus.Gatherer) *metricSampler {
	return &metricSampler{gather: g, every: sampleEvery}
}

// run samples until ctx ends.
func (m *metricSampler) run(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	m.sample(time.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.sample(now)
		}
	}
}

// isWrite and isRead classify the data service's methods.
func isWrite(method string) bool { return method == datav1.DataService_Write_FullMethodName }
func isRead(method string) bool {
	return method == datav1.DataService_Get_FullMethodName || method == datav1.DataService_Range_FullMethodName
}

func (m *metricSampler) totals(now time.Time) (*rpcTotals, error) {
	fams, err := m.gather.Gather()
	if err != nil {
		return nil, err
	}
	t := &rpcTotals{at: now, buckets: map[float64]uint64{}}
	for _, f := range fams {
		if f.GetName() != "shardkit_rpc_server_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			method := labelOf(mt, "method")
			w, r := isWrite(method), isRead(method)
			if !w && !r {
				continue
			}
			h := mt.GetHistogram()
			if w {
				t.writes += h.GetSampleCount()
			} else {
				t.reads += h.GetSampleCount()
			}
			for _, b := range h.GetBucket() {
				t.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
			}
			t.buckets[math.Inf(1)] += h.GetSampleCount()
		}
	}
	return t, nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (m *metricSampler) sample(now time.Time) {
	t, err := m.totals(now)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.prev != nil {
		m.samples = append(m.samples, between(m.prev, t))
		if len(m.samples) > keepSamples {
			m.samples = m.samples[len(m.samples)-keepSamples:]
		}
	}
	m.prev = t
}

// between is the load of the interval from a to b.
func between(a, b *rpcTotals) metricSample {
	s := metricSample{Time: b.at.UnixMilli()}
	secs := b.at.Sub(a.at).Seconds()
	if secs <= 0 {
		return s
	}
	s.WritesPerSec = float64(b.writes-a.writes) / secs
	s.ReadsPerSec = float64(b.reads-a.reads) / secs
	s.P99Ms = quantileMs(a.buckets, b.buckets, 0.99)
	return s
}

// quantileMs is the upper bound (ms) of the histogram bucket holding the
// q-quantile of the calls counted between the cumulative histograms a and
// b (0 when none was).
func quantileMs(a, b map[float64]uint64, q float64) float64 {
	bounds := make([]float64, 0, len(b))
	for ub := range b {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	total := b[math.Inf(1)] - a[math.Inf(1)]
	if total == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(total)))
	for _, ub := range bounds {
		if b[ub]-a[ub] >= want {
			if math.IsInf(ub, 1) {
				// Past the last bound: the last finite one is all we know.
				if len(bounds) > 1 {
					return bounds[len(bounds)-2] * 1000
				}
				return 0
			}
			return ub * 1000
		}
	}
	return 0
}

// metricsView is /api/v1/metrics: one instance's samples, oldest first.
type metricsView struct {
	InstanceID string         `json:"instance_id"`
	IntervalMs int64          `json:"interval_ms"`
	Samples    []metricSample `json:"samples"`
	Error      string         `json:"error,omitempty"`
}

func (m *metricSampler) view(id string) metricsView {
	m.mu.Lock()
	defer m.mu.Unlock()
	return metricsView{InstanceID: id, IntervalMs: m.every.Milliseconds(), Samples: append([]metricSample{}, m.samples...)}
}

func selfID(node *cluster.Node) string {
	if id := node.Identity(); id != nil {
		return id.InstanceID
	}
	return ""
}

func (a *consoleAPI) metricsOne(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.metrics.view(selfID(a.node)))
}

// peerMetrics reads other instances' /api/v1/metrics over their HTTP
// ports (HTTPS with the node certificate on a secure cluster).
type peerMetrics struct {
	client *http.Client
	scheme string
}

func newPeerMetrics(tlsConf *tls.Config) *peerMetrics {
	p := &peerMetrics{scheme: "http", client: &http.Client{Timeout: 2 * time.Second}}
	if tlsConf != nil {
		p.scheme = "https"
		p.client.Transport = &http.Transport{TLSClientConfig: tlsConf}
	}
	return p
}

// get reads path from the instance whose HTTP port is addr: the status
// code and the body (at most 1 MiB).
func (p *peerMetrics) get(ctx context.Context, addr, path string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+"://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

func (p *peerMetrics) fetch(ctx context.Context, id, addr string) metricsView {
	v := metricsView{InstanceID: id, IntervalMs: sampleEvery.Milliseconds(), Samples: []metricSample{}}
	code, body, err := p.get(ctx, addr, "/api/v1/metrics")
	if err != nil {
		v.Error = err.Error()
		return v
	}
	if code != http.StatusOK {
		v.Error = fmt.Sprintf("HTTP %d: %s", code, strings.TrimSpace(string(body)))
		return v
	}
	if err := json.Unmarshal(body, &v); err != nil {
		v.Error = "not the metrics expected: " + err.Error()
	}
	v.InstanceID = id
	return v
}

// metricsAll is /api/v1/metrics/cluster: every instance's samples (this
// instance's own, the others' from their HTTP ports), by instance id.
func (a *consoleAPI) metricsAll(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, 3*time.Second)
	defer cancel()
	cc, _, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	st, err := cc.GetStatus(ctx, &clusterv1.GetStatusRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	self := selfID(a.node)
	ins := statusview.FromProto(st, false).Instances
	out := make([]metricsView, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		switch {
		case in.InstanceID == self:
			out[i] = a.metrics.view(self)
		case in.HTTPAddress == "":
			out[i] = metricsView{InstanceID: in.InstanceID, Samples: []metricSample{}, Error: "it serves no HTTP port (--http-listen)"}
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = a.peers.fetch(ctx, in.InstanceID, in.HTTPAddress)
			}()
		}
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"instances": out})
}

// healthView is one instance's readiness, as its /health/ready says.
type healthView struct {
	InstanceID string `json:"instance_id"`
	Ready      bool   `json:"ready"`
	// Reason says why it is not ready (its own words), or why it could
	// not be asked.
	Reason string `json:"reason,omitempty"`
}

// healthAll is /api/v1/health/cluster: every instance's /health/ready
// (this instance's own answer, the others' from their HTTP ports).
func (a *consoleAPI) healthAll(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.callCtx(r, 3*time.Second)
	defer cancel()
	cc, _, _, err := a.clients()
	if err != nil {
		fail(w, err)
		return
	}
	st, err := cc.GetStatus(ctx, &clusterv1.GetStatusRequest{})
	if err != nil {
		fail(w, err)
		return
	}
	self := selfID(a.node)
	ins := statusview.FromProto(st, false).Instances
	out := make([]healthView, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		out[i].InstanceID = in.InstanceID
		switch {
		case in.InstanceID == self:
			why := notReady(a.node)
			out[i].Ready, out[i].Reason = why == "", why
		case in.HTTPAddress == "":
			out[i].Reason = "it serves no HTTP port (--http-listen)"
		default:
			wg.Go(func() {
				code, body, err := a.peers.get(ctx, in.HTTPAddress, "/health/ready")
				var h struct{ Status, Reason string }
				switch {
				case err != nil:
					out[i].Reason = "does not answer: " + err.Error()
				case json.Unmarshal(body, &h) != nil:
					out[i].Reason = fmt.Sprintf("HTTP %d: %s", code, strings.TrimSpace(string(body)))
				default:
					out[i].Ready, out[i].Reason = code == http.StatusOK && h.Status == "ready", h.Reason
				}
			})
		}
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"instances": out})
}
