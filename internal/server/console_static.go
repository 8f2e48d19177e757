package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// consoleFiles are the web console's pages: plain HTML, CSS and
// JavaScript modules, embedded in the binary (no build step, nothing
// fetched at run time; docs/console.md).
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP is the pages' Content-Security-Policy: everything from this
// instance only, no inline script or style, no framing.
const consoleCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// consoleHeaders sets the headers of every page of the console.
func consoleHeaders(h http.Header) {
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// registerConsolePages serves the console: / is its page, /console/ its
// files.
func registerConsolePages(mux *http.ServeMux) {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	files := http.StripPrefix("/console/", http.FileServerFS(sub))
	mux.HandleFunc("GET /console/", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w.Header())
		files.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w.Header())
		http.ServeFileFS(w, r, sub, "index.html")
	})
}
