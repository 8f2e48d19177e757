package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"

	clusterv1 "github.com/shardkit/shardkit/api/cluster/v1"
	"github.com/shardkit/shardkit/internal/cluster"
	"github.com/shardkit/shardkit/internal/meta"
	"github.com/shardkit/shardkit/internal/statusview"
)

// newHTTPHandler serves /health/live, /health/ready, /metrics, the JSON
// API /api/v1/cluster (the status, as `shardkit status --format json`;
// ?all=1 includes expelled instances), the console's API and pages (when
// api is not nil; docs/console.md) and, with profiles, Go's runtime
// profiles at /debug/pprof/ (--enable-pprof).
func newHTTPHandler(node *cluster.Node, reg *prometheus.Registry, profiles bool, api *consoleAPI) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "live"})
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, _ *http.Request) {
		if reason := notReady(node); reason != "" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not_ready", "reason": reason})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /api/v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		all := r.URL.Query().Get("all") == "1" || r.URL.Query().Get("all") == "true"
		resp, err := node.Service().GetStatus(r.Context(), &clusterv1.GetStatusRequest{All: all})
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": status.Convert(err).Message()})
			return
		}
		writeJSON(w, http.StatusOK, statusview.FromProto(resp, all))
	})
	if api != nil {
		api.register(mux)
	}
	if profiles {
		// As net/http/pprof registers them on the default mux, which this
		// server does not use.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// notReady says why the instance is not ready ("" when it is): it must be
// Online and know a leader of group 0.
func notReady(node *cluster.Node) string {
	g0 := node.Group0()
	if g0 == nil {
		if why := node.NotRunning(); why != "" {
			return why // discovering (naming the peers that do not answer) or joining
		}
		g0 = node.Group0() // it started meanwhile
	}
	if why := node.TargetRefused(); why != "" {
		return "group 0 refuses this instance's request for target " + why
	}
	if g0.Leader() == 0 {
		return "no leader of group 0 is known"
	}
	id := node.Identity()
	if id == nil {
		return "identity not known yet"
	}
	inst := node.Meta().State().InstanceByUUID(id.UUID)
	if inst == nil {
		return "this instance is not recorded in group 0 yet"
	}
	if v := inst.GetCurrentGrade().GetVariant(); v != meta.Online {
		return "current grade is " + meta.FormatGrade(inst.GetCurrentGrade()) + ", not Online"
	}
	return ""
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
