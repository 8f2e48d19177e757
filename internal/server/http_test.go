package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The runtime profiles are served only with --enable-pprof.
func TestProfilesAreServedOnlyWhenEnabled(t *testing.T) {
	t.Parallel()
	for _, enabled := range []bool{false, true} {
		h := newHTTPHandler(nil, prometheus.NewRegistry(), enabled, nil)
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			switch {
			case enabled && (rec.Code != http.StatusOK || rec.Body.Len() == 0):
				t.Errorf("enabled: GET %s: HTTP %d, %d bytes; want a profile", path, rec.Code, rec.Body.Len())
			case !enabled && rec.Code != http.StatusNotFound:
				t.Errorf("not enabled: GET %s: HTTP %d, want 404", path, rec.Code)
			}
			if enabled && strings.HasPrefix(path, "/debug/pprof/goroutine") && !strings.Contains(rec.Body.String(), "TestProfilesAreServedOnlyWhenEnabled") {
				t.Errorf("the goroutine profile does not show this test's goroutine:\n%.300s", rec.Body.String())
			}
		}
	}
}
