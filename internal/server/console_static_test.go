package server

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The console's pages fetch nothing from another origin: no URL in any
// embedded file but the SVG namespace (a name, never fetched).
func TestConsoleFetchesNothingElsewhere(t *testing.T) {
	t.Parallel()
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	n := 0
	err := fs.WalkDir(consoleFiles, "console", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := consoleFiles.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s refers to %s: the console must fetch nothing from elsewhere", path, m)
			}
		}
		return nil
	})
	if err != nil || n < 3 {
		t.Fatalf("%d files embedded, %v", n, err)
	}
}

// / serves the console's page and /console/ its files, with the
// Content-Security-Policy that allows this origin only.
func TestConsolePagesAreServed(t *testing.T) {
	t.Parallel()
	h := newHTTPHandler(nil, prometheus.NewRegistry(), false, &consoleAPI{})
	for path, want := range map[string]string{
		"/":                   "<title>shardkit console</title>",
		"/console/app.js":     "connectEvents",
		"/console/style.css":  ".grid",
		"/console/index.html": "", // FileServer redirects it to ./
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if want == "" {
			continue
		}
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: HTTP %d, %.200s", path, rec.Code, rec.Body.String())
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/app.js", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/javascript") {
		t.Errorf("app.js served as %q: a module script needs a JavaScript type", ct)
	}
}
