package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
	"github.com/prometheus/client_golang/prometheus"
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
	// bodyTimeouts counts bodies cut by their read deadline (body.go).
	bodyTimeouts prometheus.Counter

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
	s.newBodyMetrics()
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
	// memory
	mux.HandleFunc("POST /v1/cubes", s.handleCubeCreate)
	mux.HandleFunc("GET /v1/cubes", s.handleCubeList)
	mux.HandleFunc("POST /v1/cubes/import", s.handleCubeImport)
	mux.HandleFunc("GET /v1/cubes/{cube}", s.handleCubeGet)
	mux.HandleFunc("DELETE /v1/cubes/{cube}", s.handleCubeDelete)
	mux.HandleFunc("POST /v1/cubes/{cube}/memories", s.handleMemoryAdd)
	mux.HandleFunc("GET /v1/cubes/{cube}/memories", s.handleMemoryList)
	mux.HandleFunc("GET /v1/cubes/{cube}/memories/{id}", s.handleMemoryGet)
	mux.HandleFunc("PUT /v1/cubes/{cube}/memories/{id}", s.handleMemoryUpdate)
	mux.HandleFunc("PATCH /v1/cubes/{cube}/memories/{id}", s.handleMemoryUpdate)
	mux.HandleFunc("DELETE /v1/cubes/{cube}/memories/{id}", s.handleMemoryDelete)
	mux.HandleFunc("POST /v1/cubes/{cube}/search", s.handleSearch)
	mux.HandleFunc("GET /v1/cubes/{cube}/search", s.handleSearch)
	mux.HandleFunc("POST /v1/cubes/{cube}/pack", s.handlePackWarm)
	mux.HandleFunc("GET /v1/cubes/{cube}/pack", s.handlePackStatus)
	mux.HandleFunc("GET /v1/cubes/{cube}/export", s.handleCubeExport)
	mux.HandleFunc("GET /v1/cubes/{cube}/tiers", s.handleTiers)
	mux.HandleFunc("GET /v1/packs", s.handlePackList)
	mux.HandleFunc("POST /v1/generate", s.handleNativeGenerate)
	mux.HandleFunc("POST /v1/tiers/tick", s.handleTick)
	mux.HandleFunc("GET /v1/server", s.handleServerInfo)
	mux.HandleFunc("GET /v1/stats", s.handleStats)
	mux.HandleFunc("GET /v1/backup", s.handleBackup)
	mux.HandleFunc("GET /v1/cubes/{cube}/adapters", s.handleAdapters)
	// conversation memory (conversations.go)
	mux.HandleFunc("POST /v1/cubes/{cube}/messages", s.handleMessagesAdd)
	mux.HandleFunc("GET /v1/cubes/{cube}/jobs", s.handleJobs)
	mux.HandleFunc("GET /v1/cubes/{cube}/jobs/{id}", s.handleJob)
	mux.HandleFunc("POST /v1/cubes/{cube}/jobs/{id}/undo", s.handleJobUndo)
	mux.HandleFunc("GET /v1/cubes/{cube}/profile", s.handleProfile)
	mux.HandleFunc("GET /v1/cubes/{cube}/turns", s.handleTurns)
	mux.HandleFunc("GET /v1/cubes/{cube}/sessions", s.handleSessions)
	mux.HandleFunc("GET /v1/cubes/{cube}/memories/{id}/log", s.handleMemoryLog)
	mux.HandleFunc("POST /v1/keys", s.handleKeyCreate)
	if s.opts.DebugClock != nil {
		mux.HandleFunc("POST /v1/debug/clock", s.handleDebugClock)
	}
	// MCP (streamable HTTP; every method: POST, and GET/DELETE answered 405)
	mux.Handle("/mcp", s.mcpHandler())
	// observability
	mux.Handle("GET /metrics", s.m.handler())
	mux.HandleFunc("GET /ui", s.handleUI)
	mux.Handle("GET /ui/", uiAssets())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.notFound(mux, w, r) // 405 with Allow when another method has the path (allow.go)
	})
}

// public reports what needs no token: the probes, the root ("Ollama is
// running") and /api/version, as readiness checks and Ollama clients call
// them first, which reveal only the version; and the inspector page's
// static files (/ui, uiPublic), which hold no data: the page asks for the
// token and sends it with every JSON call it makes.
func public(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return r.URL.Path == "/" || r.URL.Path == "/api/version" || uiPublic(r.URL.Path)
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
// query (checkURLText), body limit, logging and request metrics.
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
				s.writeError(w, r, errUnauthorized)
				return
			}
			if scope != "" {
				if err := scopeAllows(r, scope); err != nil {
					s.writeError(w, r, err)
					return
				}
				r = r.WithContext(context.WithValue(r.Context(), scopeKey{}, scope))
			}
		}
		if err := checkURLText(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		limit := s.opts.MaxBodyBytes
		if r.URL.Path == "/v1/cubes/import" {
			limit = s.opts.MaxImportBytes
		}
		s.timeBody(w, r)
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

var (
	errUnauthorized  = errors.New("server: missing or wrong bearer token")
	errRouteNotFound = errkind.New(errkind.NotFound, "server: no such endpoint")
)

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

// scopeKey is the context key of a request's cube scope (an access key's
// cube; absent for the admin token).
type scopeKey struct{}

// scopeOf returns the cube r's access key is limited to, "" for none.
func scopeOf(r *http.Request) string {
	s, _ := r.Context().Value(scopeKey{}).(string)
	return s
}

// errForbidden is a 403: the access key may not touch that cube or route.
var errForbidden = errors.New("server: this access key may not use that")

// scopeAllows refuses, for an access key of cube scope, every route that
// names another cube (path, X-Memosrt-Cube) and every route beyond one
// cube: creating or importing cubes, all packs, ticks, keys, metrics and
// stats, backups, the debug clock. The cube of a request body is checked where it is read
// (Server.cube) and the cube list is filtered.
func scopeAllows(r *http.Request, scope string) error {
	p := r.URL.Path
	if h := r.Header.Get(CubeHeader); h != "" && h != scope {
		return fmt.Errorf("%w: cube %q (the key is for %q)", errForbidden, h, scope)
	}
	if rest, ok := strings.CutPrefix(p, "/v1/cubes/"); ok {
		c, _, _ := strings.Cut(rest, "/")
		if c != scope {
			return fmt.Errorf("%w: cube %q (the key is for %q)", errForbidden, c, scope)
		}
		return nil
	}
	switch {
	case p == "/v1/cubes" && r.Method != http.MethodGet,
		p == "/v1/packs", p == "/v1/tiers/tick", p == "/metrics", p == "/v1/stats", p == "/v1/backup", strings.HasPrefix(p, "/v1/keys"), strings.HasPrefix(p, "/v1/debug/"):
		return fmt.Errorf("%w: %s %s needs the admin token", errForbidden, r.Method, p)
	}
	return nil
}

// badField returns a *memosrt.FieldError: a 400 naming the bad request
// field.
func badField(field, format string, args ...any) error {
	return &memosrt.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// httpError is the HTTP status and OpenAI error type of an error kind.
type httpError struct {
	code int
	typ  string
}

// kindStatus is the answer to each error kind; a kind missing here is
// answered as errkind.Internal.
var kindStatus = map[errkind.Kind]httpError{
	errkind.Internal:     {http.StatusInternalServerError, "server_error"},
	errkind.Invalid:      {http.StatusBadRequest, "invalid_request_error"},
	errkind.NotFound:     {http.StatusNotFound, "not_found_error"},
	errkind.Conflict:     {http.StatusConflict, "invalid_request_error"},
	errkind.Busy:         {http.StatusTooManyRequests, "rate_limit_error"},
	errkind.Unavailable:  {http.StatusServiceUnavailable, "server_error"}, // retry: closed, no model, the shared text store down
	errkind.NoSpace:      {http.StatusInsufficientStorage, "server_error"},
	errkind.TooLarge:     {http.StatusRequestEntityTooLarge, "invalid_request_error"},
	errkind.NotSupported: {http.StatusNotImplemented, "not_implemented"},
	errkind.Upstream:     {http.StatusBadGateway, "server_error"}, // the embedder or upstream gave an unusable answer
	errkind.Canceled:     {499, "canceled"},                       // client gone; nobody reads it
	errkind.Timeout:      {http.StatusGatewayTimeout, "timeout"},
}

// errStatus maps an error to its HTTP status and OpenAI error type: the
// server's own refusals first (they have no error kind), then its kind
// (errkind.Of) through kindStatus.
func errStatus(err error) (int, string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errBodyTimeout):
		return http.StatusRequestTimeout, "invalid_request_error"
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "invalid_request_error"
	case errors.Is(err, errMethodNotAllowed):
		return http.StatusMethodNotAllowed, "invalid_request_error"
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized, "authentication_error"
	case errors.Is(err, errForbidden):
		return http.StatusForbidden, "permission_error"
	}
	h, ok := kindStatus[errkind.Of(err)]
	if !ok {
		h = kindStatus[errkind.Internal]
	}
	return h.code, h.typ
}

// errField names the request field an error is about, for OpenAI "param".
func errField(err error) string {
	var mfe *memosrt.FieldError
	var few *fieldErrorWrap
	switch {
	case errors.As(err, &mfe):
		return mfe.Field
	case errors.As(err, &few):
		return few.field
	case errors.Is(err, textmem.ErrBadCube):
		return "cube"
	case errors.Is(err, textmem.ErrEmptyText), errors.Is(err, textmem.ErrTooLarge):
		return "text"
	case errors.Is(err, runtime.ErrPromptTooLong), errors.Is(err, runtime.ErrEmptyPrompt):
		return "prompt"
	case errors.Is(err, lora.ErrNotFound), errors.Is(err, lora.ErrBadName), errors.Is(err, lora.ErrBadAdapter), errors.Is(err, lora.ErrChanged):
		return "adapters"
	}
	return ""
}

// writeError writes a JSON error: Ollama's {"error": "..."} under /api/
// and elsewhere OpenAI's {"error": {"message", "type", "param", "code"}}.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, typ := errStatus(err)
	if code >= 500 && code != http.StatusServiceUnavailable {
		s.log.Warn("request failed", "path", r.URL.Path, "status", code, "err", err)
	}
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	msg := err.Error()
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	body := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if f := errField(err); f != "" {
		body["param"] = f
	}
	if code == http.StatusTooManyRequests {
		body["code"] = "queue_full"
	}
	writeJSON(w, code, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"error":"encoding response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// decodeJSON reads the request body into v, rejecting trailing data,
// naming the bad field on a type error, and refusing a string that is not
// valid text (invalid UTF-8, a lone surrogate: checkJSONText) with a 400
// naming its field. Every route with a JSON body decodes it here (MCP's
// through mcpHandler's check).
func decodeJSON(r *http.Request, v any) error { return decodeBody(r, v, false) }

// decodeStrict is decodeJSON refusing fields v does not have (400 naming
// the field): the memory API, whose fields are all ours. The Ollama and
// OpenAI routes accept unknown fields, as those servers do.
func decodeStrict(r *http.Request, v any) error { return decodeBody(r, v, true) }

func decodeBody(r *http.Request, v any, strict bool) error {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return err // over the body limit (413) or cut (see readBody)
	}
	if err := checkJSONText(raw); err != nil {
		return err
	}
	return decodeRaw(raw, v, strict)
}

func decodeRaw(raw []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return badField(strings.Trim(f, `"`), "unknown field")
		}
		var mbe *http.MaxBytesError
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &mbe):
			return err
		case errors.As(err, &te):
			f := te.Field
			for _, emb := range []string{"oaiSampling.", "memoryInput.", "ChatRequest."} { // embedded structs
				f = strings.ReplaceAll(f, emb, "")
			}
			want := te.Type.String()
			if te.Type.Kind() == reflect.Struct {
				want = "a JSON object" // not our Go type's name
			}
			if f == "" {
				f = "body"
			}
			return badField(f, "want %s, got JSON %s", want, te.Value)
		case errors.As(err, &se):
			return badField("body", "invalid JSON at byte %d: %v", se.Offset, err)
		case errors.Is(err, io.EOF):
			return badField("body", "empty request body")
		}
		var fe *memosrt.FieldError
		if errors.As(err, &fe) {
			return err
		}
		return badField("body", "%v", err)
	}
	if dec.More() {
		return badField("body", "trailing data after the JSON value")
	}
	return nil
}

func (s *Server) handleRoot(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("memosrt is running (Ollama is running)"))
}
