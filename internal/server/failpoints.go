package server

import (
	"fmt"
	"io"
	"net/http"
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
