package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

const testModel = "stories260K"

// envConfig shapes a test server. Zero fields take test defaults.
type envConfig struct {
	dir      string          // data directory; "" uses a new t.TempDir()
	opts     Options         // server options
	mo       memosrt.Options // OS options over the test defaults (model, stores)
	nctx     int             // n_ctx; default 2048
	nseq     int             // request sequences (Parallel); default 4
	noEngine bool            // no model: the memory API only
	noEmbed  bool            // no Embedder (default: a 64-dim hash embedder)
	model    string          // GGUF path; "" is stories260K
	threads  int             // default 2
	ngl      int             // layers on a GPU (benchmarks: MEMOSRT_BENCH_NGL)
	libDir   string          // ggml backend modules (benchmarks: MEMOSRT_LIB_PATH)
	sync     bool            // fsync every commit (serve's default); tests run without
}

// env is a memosrt server over a real memosrt.OS, on a real loopback
// listener.
type env struct {
	dir string
	os  *memosrt.OS
	srv *Server
	ts  *httptest.Server
	eng *runtime.Engine
	db  *datadir.DB
	mem *textmem.Store
	kv  *kvcache.Cache
	reg *lora.Registry
}

func newEnv(t testing.TB, c envConfig) *env {
	t.Helper()
	e := &env{dir: c.dir}
	if e.dir == "" {
		e.dir = t.TempDir()
	}
	mo := c.mo
	mo.Dir, mo.NoSync = e.dir, !c.sync
	if mo.Embedder == nil && !c.noEmbed {
		mo.Embedder, _ = embed.NewHash(64)
	}
	if mo.MinPersistTokens == 0 {
		mo.MinPersistTokens = 1
	}
	if !c.noEngine && mo.Upstream == nil {
		mo.Model = c.model
		if mo.Model == "" {
			mo.Model = testmodels.Stories(t)
		}
		if mo.ModelName == "" {
			mo.ModelName = testModel
		}
		mo.Engine.NCtx, mo.Engine.Threads = c.nctx, c.threads
		if mo.Engine.NCtx == 0 {
			mo.Engine.NCtx = 2048
		}
		if mo.Engine.Threads == 0 {
			mo.Engine.Threads = 2
		}
		mo.Engine.NGPULayers, mo.Engine.LibDir = c.ngl, c.libDir
		if mo.Parallel == 0 {
			mo.Parallel = c.nseq
		}
		if mo.Parallel == 0 {
			mo.Parallel = 4
		}
	}
	o, err := memosrt.Open(context.Background(), mo)
	if err != nil {
		t.Fatal(err)
	}
	e.os, e.eng, e.db, e.mem, e.kv, e.reg = o, o.Engine(), o.DB(), o.TextStore(), o.KVCache(), o.AdapterRegistry()
	if e.srv, err = New(o, c.opts); err != nil {
		t.Fatal(err)
	}
	e.ts = httptest.NewServer(e.srv)
	t.Cleanup(func() { e.close(t) })
	return e
}

// close shuts everything down in order; idempotent.
func (e *env) close(t testing.TB) {
	if e.ts == nil {
		return
	}
	e.ts.Close()
	e.ts = nil
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := e.srv.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := e.os.Close(context.Background()); err != nil {
		t.Errorf("OS Close: %v", err)
	}
}

func (e *env) url() string { return e.ts.URL }

func ollamaClient(t testing.TB, base string) *api.Client {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	return api.NewClient(u, http.DefaultClient)
}

func openaiClient(base string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(base + "/v1/"), option.WithAPIKey("test"),
		option.WithMaxRetries(0)}, opts...)...)
}

// do sends a JSON request and decodes a JSON answer into out (if non-nil);
// it returns the status code.
func do(t testing.TB, method, u string, body any, out any, hdr ...string) int {
	t.Helper()
	status, b := send(t, method, u, body, hdr...)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, u, b, err)
		}
	}
	return status
}

// send sends a request (body nil, []byte, a string, or a value sent as
// JSON) with headers hdr (name, value, ...) and returns the status code and
// the answer's body.
func send(t testing.TB, method, u string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// oaiError is the OpenAI error body.
type oaiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    any     `json:"code"`
	} `json:"error"`
}

// lineReader reads NDJSON lines of a streamed response.
type lineReader struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func stream(t testing.TB, ctx context.Context, u string, body any, hdr ...string) *lineReader {
	t.Helper()
	j, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	return &lineReader{resp: resp, sc: sc}
}

func (l *lineReader) next() (map[string]any, bool) {
	if !l.sc.Scan() {
		return nil, false
	}
	var m map[string]any
	json.Unmarshal(l.sc.Bytes(), &m)
	return m, true
}

func (l *lineReader) close() { l.resp.Body.Close() }

func addCube(t testing.TB, e *env, cube string, mems ...string) {
	t.Helper()
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]string{"name": cube}, nil); code != http.StatusCreated {
		t.Fatalf("create cube %s: %d", cube, code)
	}
	for _, m := range mems {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+cube+"/memories", map[string]string{"text": m}, nil); code != http.StatusCreated {
			t.Fatalf("add memory: %d", code)
		}
	}
}

var lilyMemories = []string{"Lily has a dog named Max.", "Max is brown and likes to run in the park.", "Lily's favourite food is apple pie."}
