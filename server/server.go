package server

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/server/memory"
	"github.com/memosrt/memosrt/server/ui"
	"github.com/memosrt/memosrt/server/wire"
)

// CubeHeader is the request header naming the memory cube.
const CubeHeader = "X-Memosrt-Cube"

// Server serves the HTTP APIs over one memosrt.OS. Safe for concurrent use.
type Server struct {
	opts    Options
	os      *memosrt.OS
	log     *slog.Logger
	handler http.Handler
	m       *metrics

	// mu guards closed and the Add side of inflight.
	mu       sync.RWMutex
	closed   bool
	inflight sync.WaitGroup
}

// New returns a Server over o, which the caller keeps owning (close it
// after Shutdown). Without a model in o the memory API works and the
// inference endpoints answer 503.
func New(o *memosrt.OS, opts Options) (*Server, error) {
	if o == nil {
		return nil, fmt.Errorf("%w: no memosrt.OS", ErrBadOptions)
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.ensureDefaults()
	s := &Server{opts: opts, os: o, log: opts.Logger}
	s.m = newMetrics(s)
	mux := http.NewServeMux()
	s.routes(mux)
	s.handler = s.wrap(mux)
	return s, nil
}

// Handler returns the root handler (all routes, auth, limits, logging).
func (s *Server) Handler() http.Handler { return s.handler }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Shutdown refuses new requests (503) and waits for in-flight ones, or
// until ctx ends. Idempotent. The OS stays open; the caller closes it
// afterwards (which waits for its background pack writes).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) routes(mux *http.ServeMux) {
	// Ollama
	mux.HandleFunc("GET /{$}", s.handleRoot)
	mux.HandleFunc("HEAD /{$}", s.handleRoot)
	mux.HandleFunc("POST /api/chat", s.handleOllamaChat)
	mux.HandleFunc("POST /api/generate", s.handleOllamaGenerate)
	mux.HandleFunc("POST /api/embed", s.handleOllamaEmbed)
	mux.HandleFunc("POST /api/embeddings", s.handleOllamaEmbeddings)
	mux.HandleFunc("GET /api/tags", s.handleOllamaTags)
	mux.HandleFunc("POST /api/show", s.handleOllamaShow)
	mux.HandleFunc("GET /api/ps", s.handleOllamaPS)
	mux.HandleFunc("GET /api/version", s.handleOllamaVersion)
	for _, p := range []string{"POST /api/pull", "POST /api/push", "POST /api/copy", "DELETE /api/delete", "POST /api/create",
		"POST /api/blobs/{digest}", "HEAD /api/blobs/{digest}"} {
		mux.HandleFunc(p, s.handleOllamaModelStore)
	}
	// OpenAI
	mux.HandleFunc("POST /v1/chat/completions", s.handleOpenAIChat)
	mux.HandleFunc("POST /v1/completions", s.handleOpenAICompletion)
	mux.HandleFunc("POST /v1/embeddings", s.handleOpenAIEmbeddings)
	mux.HandleFunc("GET /v1/models", s.handleOpenAIModels)
	mux.HandleFunc("GET /v1/models/{model...}", s.handleOpenAIModel)
	// memory API (package memory)
	memory.New(s.os, memory.Options{Version: s.opts.Version, Logger: s.log}).Register(mux)
	// native
	mux.HandleFunc("POST /v1/generate", s.handleNativeGenerate)
	mux.HandleFunc("GET /v1/server", s.handleServerInfo)
	mux.HandleFunc("GET /v1/stats", s.handleStats)
	if s.opts.DebugClock != nil {
		mux.HandleFunc("POST /v1/debug/clock", s.handleDebugClock)
	}
	// MCP (streamable HTTP; every method: POST, and GET/DELETE answered 405)
	mux.Handle("/mcp", s.mcpHandler())
	// observability
	mux.Handle("GET /metrics", s.m.handler())
	mux.HandleFunc("GET /ui", s.handleUI)
	mux.Handle("GET /ui/", ui.Assets())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.notFound(mux, w, r) // 405 with Allow when another method has the path (allow.go)
	})
}

// public reports what needs no token: the probes, the root ("Ollama is
// running") and /api/version, as readiness checks and Ollama clients call
// them first, which reveal only the version; and the playground page's
// static files (/ui, ui.Public), which hold no data: the page asks for the
// token and sends it with every JSON call it makes.
func public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return r.URL.Path == "/" || r.URL.Path == "/api/version" || ui.Public(r.URL.Path)
}

// statusWriter records the status code for logs and metrics.
type statusWriter struct {
	http.ResponseWriter
	code  int
	bytes int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap adds, outermost first: shutdown gate, auth, text of the path and
// query (wire.CheckURLText), body limit, logging and request metrics.
func (s *Server) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			s.writeError(w, r, ErrClosed)
			return
		}
		s.inflight.Add(1)
		s.mu.RUnlock()
		defer s.inflight.Done()

		if s.opts.Token != "" && !public(r) {
			scope, ok := s.authorized(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="memosrt"`)
				s.writeError(w, r, wire.ErrUnauthorized)
				return
			}
			if scope != "" {
				if err := scopeAllows(r, scope); err != nil {
					s.writeError(w, r, err)
					return
				}
				r = wire.WithScope(r, scope)
			}
		}
		if err := wire.CheckURLText(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		limit, wait := s.opts.MaxBodyBytes, s.opts.BodyReadTimeout
		if r.URL.Path == "/v1/cubes/import" {
			limit, wait = s.opts.MaxImportBytes, s.opts.ImportReadTimeout
		}
		wire.TimeBody(w, r, wait, s.m.bodyTimeouts.Inc)
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		sw := &statusWriter{ResponseWriter: w}
		start := time.Now()
		// the last line of defence, not the fix: a panic in a handler is
		// a 500 with its stack logged, never the end of the server
		defer func() {
			v := recover()
			if v == nil || v == http.ErrAbortHandler {
				if v != nil {
					panic(v)
				}
				return
			}
			s.m.panics.Inc()
			s.log.Error("panic in a request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if sw.code == 0 {
				s.writeError(sw, r, fmt.Errorf("server: internal error (%v)", v))
			}
		}()
		next.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		s.m.requests.WithLabelValues(route, fmt.Sprint(code)).Inc()
		lvl := slog.LevelDebug
		if code >= 500 && code != http.StatusServiceUnavailable {
			lvl = slog.LevelWarn // 503 is deliberate: shutting down, or no room now
		}
		s.log.Log(r.Context(), lvl, "request", "method", r.Method, "path", r.URL.Path, "status", code,
			"bytes", sw.bytes, "ms", time.Since(start).Milliseconds())
	})
}

// errRouteNotFound is a 404: no route has the path.
var errRouteNotFound = errkind.New(errkind.NotFound, "server: no such endpoint")

// authorized checks the bearer token: the admin token (Options.Token) or
// the local one may use every cube (scope ""); an access key
// (memosrt.OS.CreateKey) only its cube (scope = that cube).
func (s *Server) authorized(r *http.Request) (scope string, ok bool) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) == 1 ||
		s.opts.LocalToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.LocalToken)) == 1 {
		return "", true
	}
	k, err := s.os.KeyCube(r.Context(), tok)
	if err != nil {
		return "", false
	}
	return k.Cube, true
}

// scopeAllows refuses, for an access key of cube scope, every route that
// names another cube (path, X-Memosrt-Cube) and every route beyond one
// cube: creating or importing cubes, all packs, ticks, keys, metrics and
// stats, backups, the debug clock. The cube of a request body is checked where it is read
// (Server.cube) and the cube list is filtered.
func scopeAllows(r *http.Request, scope string) error {
	p := r.URL.Path
	if h := r.Header.Get(CubeHeader); h != "" && h != scope {
		return fmt.Errorf("%w: cube %q (the key is for %q)", wire.ErrForbidden, h, scope)
	}
	if rest, ok := strings.CutPrefix(p, "/v1/cubes/"); ok {
		c, _, _ := strings.Cut(rest, "/")
		if c != scope {
			return fmt.Errorf("%w: cube %q (the key is for %q)", wire.ErrForbidden, c, scope)
		}
		return nil
	}
	switch {
	case p == "/v1/cubes" && r.Method != http.MethodGet,
		p == "/v1/packs", p == "/v1/tiers/tick", p == "/metrics", p == "/v1/stats", p == "/v1/backup", strings.HasPrefix(p, "/v1/keys"), strings.HasPrefix(p, "/v1/debug/"):
		return fmt.Errorf("%w: %s %s needs the admin token", wire.ErrForbidden, r.Method, p)
	}
	return nil
}

// writeError writes err as a JSON error with its status (wire.WriteError),
// logging a server-side failure.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	wire.WriteError(s.log, w, r, err)
}

func (s *Server) handleRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("memosrt is running (Ollama is running)"))
}
