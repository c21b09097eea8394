package server

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"

	"github.com/memosrt/memosrt/server/wire"
)

// The inspector page: plain HTML, CSS and JavaScript embedded in the
// binary (nothing from a CDN). It reads the JSON APIs below every 2 s with
// the bearer token the user gives it (kept in the browser's localStorage),
// so an access key sees its own cube only, as everywhere else.
//
//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

// uiFS is the page's files with the ui/ prefix removed.
func uiFS() fs.FS {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // programmer error: the embed directive names ui/
	}
	return sub
}

// uiPublic reports whether path is one of the inspector's static files:
// /ui, /ui/ or /ui/NAME for an embedded file. Anything else under /ui/ is
// not public (and not found).
func uiPublic(path string) bool {
	if path == "/ui" || path == "/ui/" {
		return true
	}
	name, ok := strings.CutPrefix(path, "/ui/")
	if !ok || !fs.ValidPath(name) {
		return false
	}
	st, err := fs.Stat(uiFS(), name)
	return err == nil && !st.IsDir()
}

// uiSecurity is the page's Content-Security-Policy: its own scripts,
// styles and API only.
const uiSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// handleUI answers GET /ui with the inspector page.
func (s *Server) handleUI(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(uiFS(), "index.html")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	uiHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func uiHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiSecurity)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// uiAssets serves GET /ui/ (the page) and /ui/NAME (its files).
func uiAssets() http.Handler {
	files := http.StripPrefix("/ui/", http.FileServerFS(uiFS()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !uiPublic(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		uiHeaders(w)
		files.ServeHTTP(w, r)
	})
}

// handleStats answers GET /v1/stats (admin token only): the model, the
// OS's gauges (memosrt.Stats) and its budgets with their use
// (memosrt.Budgets). The inspector's header shows them.
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	b, err := s.os.Budgets(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	mi := s.os.Model()
	wire.WriteJSON(w, http.StatusOK, map[string]any{
		"version": s.opts.Version,
		"model": map[string]any{"name": mi.Name, "backend": mi.Backend, "n_ctx": mi.NCtx, "family": mi.Family,
			"parameter_size": mi.ParamSize, "quantization_level": mi.Quant},
		"stats":   s.os.Stats(),
		"budgets": b,
	})
}
