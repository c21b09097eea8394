package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/memosrt/memosrt"
)

// serve runs one request through the server's handler in process.
func serve(s *Server, method, target string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://memosrt"+target, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// checkAnswer fails t on a server error or a malformed error answer. Only
// 503 (no backend, or loading) and 429 (queue full) are allowed 5xx-like
// answers; a 4xx carries a JSON body naming the problem.
func checkAnswer(t *testing.T, rec *httptest.ResponseRecorder, what string) {
	t.Helper()
	code := rec.Code
	if code >= 500 && code != http.StatusServiceUnavailable {
		t.Fatalf("%s: %d %s", what, code, rec.Body.String())
	}
	if code >= 400 && code != 404 && code != 405 {
		if !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("%s: %d with a non-JSON body %q", what, code, rec.Body.String())
		}
	}
}

var memoryRoutes = []struct{ method, path string }{
	{"POST", "/v1/cubes"},
	{"GET", "/v1/cubes/%c"},
	{"DELETE", "/v1/cubes/%c"},
	{"POST", "/v1/cubes/%c/memories"},
	{"GET", "/v1/cubes/%c/memories"},
	{"GET", "/v1/cubes/%c/memories/%i"},
	{"PUT", "/v1/cubes/%c/memories/%i"},
	{"PATCH", "/v1/cubes/%c/memories/%i"},
	{"DELETE", "/v1/cubes/%c/memories/%i"},
	{"POST", "/v1/cubes/%c/search"},
	{"GET", "/v1/cubes/%c/search?q=%q&k=%i"},
	{"POST", "/v1/cubes/%c/pack"},
	{"GET", "/v1/cubes/%c/export"},
}

// FuzzMemoryAPI sends fuzzed bodies, cube names and ids to every memory
// API route of a server without an inference backend: never a 5xx but
// 503, never a panic, and a memory that was stored reads back as sent.
func FuzzMemoryAPI(f *testing.F) {
	e := newEnv(f, envConfig{noEngine: true})
	if rec := serve(e.srv, "POST", "/v1/cubes", []byte(`{"name":"fuzz"}`)); rec.Code != http.StatusCreated {
		f.Fatalf("create: %d %s", rec.Code, rec.Body.String())
	}
	seeds := []string{`{"text":"Lily has a dog."}`, `{"memories":[{"text":"a"},{"text":"b","kind":"fact","tags":["x"]}]}`,
		`{"name":"c2","description":"d","metadata":{"k":"v"}}`, `{"query":"dog","k":3,"kinds":["fact"]}`, `{"text":""}`,
		`{"text":"\ud800"}`, `{"event_time":"2024-13-45T99:00:00Z","text":"x"}`, `{"resident":true}`, `[]`, `{"k":-1}`, ``}
	for i, s := range seeds {
		f.Add(uint8(i), "fuzz", "0123456789abcdef01234567", []byte(s))
	}
	f.Fuzz(func(t *testing.T, route uint8, cube, id string, body []byte) {
		r := memoryRoutes[int(route)%len(memoryRoutes)]
		path := strings.NewReplacer("%c", url.PathEscape(cube), "%i", url.PathEscape(id), "%q", url.QueryEscape(string(body))).Replace(r.path)
		rec := serve(e.srv, r.method, path, body)
		checkAnswer(t, rec, r.method+" "+path)
		if r.path == "/v1/cubes/%c/memories" && r.method == "POST" && rec.Code == http.StatusCreated {
			var in, out struct {
				Text string `json:"text"`
			}
			// an exact duplicate after case folding and whitespace
			// collapsing returns the memory stored first (textmem.Store.Add)
			fold := func(s string) string { return strings.Join(strings.Fields(strings.ToLower(s)), " ") }
			if json.Unmarshal(body, &in) == nil && in.Text != "" && json.Unmarshal(rec.Body.Bytes(), &out) == nil && fold(out.Text) != fold(in.Text) {
				t.Fatalf("stored %q, sent %q", out.Text, in.Text)
			}
			if !utf8.ValidString(out.Text) {
				t.Fatalf("stored invalid UTF-8 %q", out.Text)
			}
		}
	})
}

// FuzzCubeImport posts fuzzed cube archives (seeded with a real export
// holding memories): every archive is imported or refused with a 4xx,
// never a 5xx or a panic.
func FuzzCubeImport(f *testing.F) {
	e := newEnv(f, envConfig{noEngine: true})
	for _, b := range []string{`{"name":"src"}`} {
		serve(e.srv, "POST", "/v1/cubes", []byte(b))
	}
	serve(e.srv, "POST", "/v1/cubes/src/memories", []byte(`{"memories":[{"text":"Lily has a dog."},{"text":"猫 🐈","kind":"fact","tags":["t"]}]}`))
	export := serve(e.srv, "GET", "/v1/cubes/src/export", nil)
	if export.Code != http.StatusOK {
		f.Fatalf("export: %d %s", export.Code, export.Body.String())
	}
	arch := export.Body.Bytes()
	f.Add(arch, "copy", true)
	f.Add(arch[:len(arch)/2], "half", false)
	f.Add([]byte{}, "", false)
	f.Add(bytes.Repeat([]byte{0}, 1024), "zeros", false)
	f.Fuzz(func(t *testing.T, archive []byte, cube string, replace bool) {
		q := url.Values{}
		if cube != "" {
			q.Set("cube", cube)
		}
		if replace {
			q.Set("replace", "true")
		}
		rec := serve(e.srv, "POST", "/v1/cubes/import?"+q.Encode(), archive)
		checkAnswer(t, rec, "import")
	})
}

var inferenceRoutes = []string{"/api/generate", "/api/chat", "/v1/chat/completions", "/v1/completions", "/api/embed",
	"/api/embeddings", "/v1/embeddings", "/api/show"}

// FuzzInferenceAPI sends fuzzed JSON bodies to the Ollama and OpenAI
// endpoints of a server with the stories260K engine (n_ctx 256, at most 4
// generated tokens by default): a 2xx or a 4xx with a JSON error, 503 or
// 429 under load, never another 5xx or a panic.
func FuzzInferenceAPI(f *testing.F) {
	e := newEnv(f, envConfig{nctx: 256, nseq: 2, mo: memosrt.Options{DefaultNumPredict: 4}})
	seeds := []string{
		`{"model":"stories260K","prompt":"Once upon a time","stream":false}`,
		`{"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"options":{"temperature":0.5,"num_predict":3,"cube":"c"}}`,
		`{"model":"stories260K","messages":[{"role":"system","content":"s"},{"role":"user","content":"猫 🐈"}],"max_tokens":3,"stream":true}`,
		`{"model":"stories260K","prompt":["a","b"],"max_tokens":2}`,
		`{"model":"stories260K","input":["a","b"]}`,
		`{"model":"stories260K","prompt":"x","options":{"num_ctx":100000,"stop":["\u0000"]}}`,
		`{"model":"stories260K","prompt":"\ud800"}`,
		`{}`, `null`, ``,
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := inferenceRoutes[int(route)%len(inferenceRoutes)]
		rec := serve(e.srv, "POST", path, body)
		if rec.Code == http.StatusTooManyRequests {
			return
		}
		checkAnswer(t, rec, "POST "+path)
	})
}
