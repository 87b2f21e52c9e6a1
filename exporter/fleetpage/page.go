// Package fleetpage is the fleet page chamber-controller serves beside its metrics
// (--fleet-page): every node's GPUs coloured by state, each team's GPUs, idle GPUs and
// cost, the queue, and the isolated nodes with their faults, updated every few
// seconds.
//
// Like the exporter, it reads the fleet model's snapshot and nothing else: a request
// never lists from the API server. Its HTML, script and style are embedded in the
// binary; the page loads nothing from anywhere else (its Content-Security-Policy
// says so to the browser too). It is served by the metrics server, so it sits behind
// the metrics endpoint's authentication and authorization (SignIn explains how a
// browser passes them).
package fleetpage

import (
	"compress/gzip"
	"embed"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"chamber.dev/chamber/fleet"
)

// Path is where the page is served: the page itself, its data (Path+"data") and its
// assets are below it.
const Path = "/fleet/"

// DefaultRefresh is how often the page asks for the fleet again.
const DefaultRefresh = 5 * time.Second

//go:embed assets
var assets embed.FS

// Source is the fleet as the page reads it; *fleet.Model is one.
type Source interface {
	// Synced is false until the model holds what its informers had at start (and on
	// a replica that is not the leader, which keeps no model).
	Synced() bool
	Snapshot() *fleet.Snapshot
}

// Page serves the fleet page under Path.
type Page struct {
	source  Source
	refresh time.Duration
	files   http.Handler
}

// New is the page of source's fleet, asking for it again every refresh
// (DefaultRefresh when 0).
func New(source Source, refresh time.Duration) *Page {
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded directory is part of the binary
	}
	return &Page{source: source, refresh: refresh, files: http.StripPrefix(Path, http.FileServerFS(sub))}
}

// contentSecurityPolicy keeps the page to its own origin: no script, style, font or
// image from elsewhere, no inline script, and no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// ServeHTTP serves the page (Path), its data (Path+"data") and its assets.
func (p *Page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the fleet page is read-only", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	switch r.URL.Path {
	case Path + "data":
		p.serveData(w, r)
	case Path + "signin.html":
		http.NotFound(w, r) // SignIn's, before authentication
	default:
		// Path itself is index.html; the file server answers the assets and 404s.
		p.files.ServeHTTP(w, r)
	}
}

// notSynced is the data's answer where there is no fleet to show.
type notSynced struct {
	Message string `json:"message"`
}

func (p *Page) serveData(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "Accept-Encoding")
	if !p.source.Synced() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(notSynced{Message: "this replica holds no fleet yet: it is not the leader, or its inventory has not synced"})
		return
	}
	v := Build(p.source.Snapshot())
	v.RefreshSeconds = p.refresh.Seconds()
	// About 200 bytes a GPU, every few seconds: 1.6 MB for 1,000 nodes of 8, 120 KB
	// compressed.
	var out io.Writer = w
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		defer gz.Close()
		out = gz
	}
	_ = json.NewEncoder(out).Encode(v)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(coding) == "gzip" && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
