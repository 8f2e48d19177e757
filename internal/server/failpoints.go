package server

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/shardkit/shardkit/internal/failpoint"
)

// withFailpoints adds /debug/failpoints/<name> to h in binaries built with
// the failpoints tag (tests of the real binary crash it at named points):
// PUT with a body of "kill" (SIGKILL the worker there), "sleep <duration>"
// or "error", DELETE to remove. In release builds h is returned as it is.
func withFailpoints(h http.Handler, fp *failpoint.Points) http.Handler {
	if !fp.Enabled() {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("/debug/failpoints/{name...}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		switch r.Method {
		case http.MethodDelete:
			fp.Set(name, nil)
		case http.MethodPut:
			body, _ := io.ReadAll(io.LimitReader(r.Body, 1024))
			hook, err := parseHook(strings.TrimSpace(string(body)))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fp.Set(name, hook)
		default:
			http.Error(w, "PUT or DELETE", http.StatusMethodNotAllowed)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// EnvFailpoints names the environment variable whose failpoints an
// instance built with the failpoints tag sets as it starts, before any
// traffic: "name=action" pairs separated by ";", the actions as for
// /debug/failpoints (e.g. "replicasetSkipReadIndex=error"). Unlike the
// HTTP endpoint it holds through restarts: a robustness run's deliberate
// defects are set this way. A build without failpoints ignores it.
const EnvFailpoints = "SHARDKIT_FAILPOINTS"

// setFailpointsFromEnv sets the failpoints EnvFailpoints lists; an error
// names the pair it cannot parse.
func setFailpointsFromEnv(fp *failpoint.Points) error {
	spec := os.Getenv(EnvFailpoints)
	if !fp.Enabled() || strings.TrimSpace(spec) == "" {
		return nil
	}
	for _, pair := range strings.Split(spec, ";") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		name, action, ok := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("%s: %q is not name=action", EnvFailpoints, pair)
		}
		hook, err := parseHook(strings.TrimSpace(action))
		if err != nil {
			return fmt.Errorf("%s: failpoint %s: %w", EnvFailpoints, name, err)
		}
		fp.Set(name, hook)
	}
	return nil
}

func parseHook(s string) (func() error, error) {
	switch {
	case s == "kill":
		return failpoint.Kill, nil
	case s == "error":
		return func() error { return fmt.Errorf("failpoint: injected error") }, nil
	case strings.HasPrefix(s, "sleep "):
		d, err := time.ParseDuration(strings.TrimPrefix(s, "sleep "))
		if err != nil {
			return nil, err
		}
		return func() error { time.Sleep(d); return nil }, nil
	}
	return nil, fmt.Errorf("unknown failpoint action %q: want kill, error or sleep <duration>", s)
}
