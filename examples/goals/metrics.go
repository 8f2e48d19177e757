package goals

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RequestCounts reads a client's registry: server requests sent by Gets
// (first tries, hedges and retries, not pings) and logical shard requests.
func RequestCounts(g prometheus.Gatherer) (sent, logical float64) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "shardkit_cache_client_requests_total":
			for _, m := range mf.GetMetric() {
				kind := ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" {
						kind = l.GetValue()
					}
				}
				if kind != "ping" {
					sent += m.GetCounter().GetValue()
				}
			}
		case "shardkit_cache_client_logical_shard_requests_total":
			for _, m := range mf.GetMetric() {
				logical += m.GetCounter().GetValue()
			}
		}
	}
	return sent, logical
}
