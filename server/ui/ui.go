package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// files are the page's HTML, CSS and JavaScript.
//
//go:embed index.html app.js style.css
var files embed.FS

// Public reports whether path is one of the playground page's static files:
// /ui, /ui/ or /ui/NAME for an embedded file. Anything else under /ui/ is
// not public (and not found).
func Public(path string) bool {
	if path == "/ui" || path == "/ui/" {
		return true
	}
	name, ok := strings.CutPrefix(path, "/ui/")
	if !ok || !fs.ValidPath(name) {
		return false
	}
	st, err := fs.Stat(files, name)
	return err == nil && !st.IsDir()
}

// security is the page's Content-Security-Policy: its own scripts,
// styles and API only.
const security = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Page writes the playground page, the answer to GET /ui. Errors: the page
// could not be read (nothing is written then; the caller answers it).
func Page(w http.ResponseWriter) error {
	b, err := fs.ReadFile(files, "index.html")
	if err != nil {
		return err
	}
	headers(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
	return nil
}

// headers sets the security and caching headers of every answer.
func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", security)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// Assets returns the handler of GET /ui/ (the page) and /ui/NAME (its
// files, with their security headers); any other path under /ui/ is a
// plain 404. Safe for concurrent use.
func Assets() http.Handler {
	fsrv := http.StripPrefix("/ui/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Public(r.URL.Path) {
			http.NotFound(w, r)
			return
		}
		headers(w)
		fsrv.ServeHTTP(w, r)
	})
}
