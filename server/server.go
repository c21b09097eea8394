package server

import (
	"context"
	"crypto/subtle"
	"errors"
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

	table []route // every route and its need, in registration order (routes)

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
	rt := router{s: s, mux: mux}
	h := func(need wire.Need, pattern string, f http.HandlerFunc) { rt.Handle(need, pattern, f) }
	// Ollama
	h(wire.NeedPublic, "GET /{$}", s.handleRoot)
	h(wire.NeedPublic, "HEAD /{$}", s.handleRoot)
	h(wire.NeedKey, "POST /api/chat", s.handleOllamaChat) // the cube's read right: Server.cube
	h(wire.NeedKey, "POST /api/generate", s.handleOllamaGenerate)
	h(wire.NeedKey, "POST /api/embed", s.handleOllamaEmbed)
	h(wire.NeedKey, "POST /api/embeddings", s.handleOllamaEmbeddings)
	h(wire.NeedKey, "GET /api/tags", s.handleOllamaTags)
	h(wire.NeedKey, "POST /api/show", s.handleOllamaShow)
	h(wire.NeedKey, "GET /api/ps", s.handleOllamaPS)
	h(wire.NeedPublic, "GET /api/version", s.handleOllamaVersion)
	for _, p := range []string{"POST /api/pull", "POST /api/push", "POST /api/copy", "DELETE /api/delete", "POST /api/create",
		"POST /api/blobs/{digest}", "HEAD /api/blobs/{digest}"} {
		h(wire.NeedAdmin, p, s.handleOllamaModelStore)
	}
	// OpenAI
	h(wire.NeedKey, "POST /v1/chat/completions", s.handleOpenAIChat)
	h(wire.NeedKey, "POST /v1/completions", s.handleOpenAICompletion)
	h(wire.NeedKey, "POST /v1/embeddings", s.handleOpenAIEmbeddings)
	h(wire.NeedKey, "GET /v1/models", s.handleOpenAIModels)
	h(wire.NeedKey, "GET /v1/models/{model...}", s.handleOpenAIModel)
	// memory API (package memory)
	memory.New(s.os, memory.Options{Version: s.opts.Version, Logger: s.log, CreatedBy: s.createdBy}).Register(rt)
	// native
	h(wire.NeedKey, "POST /v1/generate", s.handleNativeGenerate)
	h(wire.NeedKey, "GET /v1/server", s.handleServerInfo)
	h(wire.NeedAdmin, "GET /v1/stats", s.handleStats)
	if s.opts.DebugClock != nil {
		h(wire.NeedAdmin, "POST /v1/debug/clock", s.handleDebugClock)
	}
	// MCP (streamable HTTP; every method: POST, and GET/DELETE answered
	// 405); each tool call checks its cube's right
	rt.Handle(wire.NeedKey, "/mcp", s.mcpHandler())
	// observability
	rt.Handle(wire.NeedAdmin, "GET /metrics", s.m.handler())
	h(wire.NeedPublic, "GET /ui", s.handleUI)
	rt.Handle(wire.NeedPublic, "GET /ui/", ui.Assets())
	h(wire.NeedKey, "/", func(w http.ResponseWriter, r *http.Request) {
		s.notFound(mux, w, r) // 405 with Allow when another method has the path (allow.go)
	})
}

// route is a registered route and what it needs of the bearer token.
type route struct {
	pattern string
	need    wire.Need
}

// router is the wire.Router of the server's mux: every route is added
// through it, with what it needs (Server.table lists them), and checked by
// Server.guard before its handler runs.
type router struct {
	s   *Server
	mux *http.ServeMux
}

// Handle implements wire.Router.
func (rt router) Handle(need wire.Need, pattern string, h http.Handler) {
	if need < wire.NeedPublic || need > wire.NeedAdmin {
		panic(fmt.Sprintf("server: route %q registered with %s", pattern, need)) // a programmer error
	}
	rt.s.table = append(rt.s.table, route{pattern, need})
	rt.mux.Handle(pattern, rt.s.guard(need, h))
}

// guard refuses, for a request made with an access key, a route whose need
// the key does not meet: an admin route, or the read or write right on the
// path's {cube} (memosrt.OS.KeyAllows: 403 naming the cube and the right).
// The auth middleware (wrap) has checked the token itself.
func (s *Server) guard(need wire.Need, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := wire.Key(r); k != nil {
			var err error
			switch need {
			case wire.NeedAdmin:
				err = fmt.Errorf("%w: %s %s needs the admin token (key %s)", wire.ErrForbidden, r.Method, r.URL.Path, k.ID)
			case wire.NeedRead:
				err = s.os.KeyAllows(r.Context(), *k, r.PathValue("cube"), memosrt.KeyRead)
			case wire.NeedWrite:
				err = s.os.KeyAllows(r.Context(), *k, r.PathValue("cube"), memosrt.KeyWrite)
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		h.ServeHTTP(w, r)
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
			k, err := s.authenticate(r.Context(), r.Header)
			if err != nil {
				if errors.Is(err, wire.ErrUnauthorized) {
					w.Header().Set("WWW-Authenticate", `Bearer realm="memosrt"`)
				}
				s.writeError(w, r, err)
				return
			}
			if k != nil {
				r = wire.WithKey(r, *k)
				// each cube the header names (a list: splitCubes) is one
				// the key may read, on every route (the routes' own needs
				// are Server.guard's and Server.cubes': write on a list's
				// first)
				for _, c := range splitCubes(r.Header.Get(CubeHeader)) {
					if c == "" {
						continue // an empty name: the route's 400
					}
					if err := s.os.KeyAllows(r.Context(), *k, c, memosrt.KeyRead); err != nil {
						s.writeError(w, r, err)
						return
					}
				}
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

// authenticate checks the bearer token of headers h: the admin token
// (Options.Token) or the local one may use every cube (nil key); an access
// key (memosrt.OS.CreateKey) what its grants allow. Errors: an unknown,
// revoked or expired key, or no token, wrap wire.ErrUnauthorized (401);
// the text store's (503 when it is down).
func (s *Server) authenticate(ctx context.Context, h http.Header) (*memosrt.AccessKey, error) {
	tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, wire.ErrUnauthorized
	}
	tok = strings.TrimSpace(tok)
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.Token)) == 1 ||
		s.opts.LocalToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.LocalToken)) == 1 {
		return nil, nil
	}
	k, err := s.os.Key(ctx, tok)
	switch {
	case errors.Is(err, memosrt.ErrUnknownKey):
		return nil, wire.ErrUnauthorized
	case errors.Is(err, memosrt.ErrKeyExpired):
		return nil, fmt.Errorf("%w: %w", wire.ErrUnauthorized, err)
	case err != nil:
		return nil, err
	}
	return &k, nil
}

// createdBy names the maker of a key made by request r: "admin" (the admin
// token), "local" (the CLI's local token), "" when the server requires no
// token.
func (s *Server) createdBy(r *http.Request) string {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch tok = strings.TrimSpace(tok); {
	case s.opts.Token == "":
		return ""
	case s.opts.LocalToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.LocalToken)) == 1:
		return "local"
	}
	return "admin"
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
