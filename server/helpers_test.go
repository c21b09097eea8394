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

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

const testModel = "stories260K"

// envConfig shapes a test server. Zero fields take test defaults.
type envConfig struct {
	dir      string // data directory; "" uses a new t.TempDir()
	opts     Options
	eo       EngineOptions
	nctx     int
	nseq     int
	noEngine bool   // attach no backend
	noEmbed  bool   // no Embedder (default: a 64-dim hash embedder)
	lora     bool   // engine with LoRA; EngineOptions.Adapters over e.reg
	model    string // GGUF path; "" is stories260K
	threads  int    // default 2
	ngl      int    // layers on a GPU (benchmarks: MEMOSRT_BENCH_NGL)
	libDir   string // ggml backend modules (benchmarks: MEMOSRT_LIB_PATH)
	tiers    bool   // Options.Tiers over a read-only scheduler.Tiers
}

// env is a memosrt server over real resources, on a real loopback listener.
type env struct {
	dir string
	srv *Server
	ts  *httptest.Server
	eng *runtime.Engine
	db  *badger.DB
	mem *textmem.Store
	kv  *kvcache.Cache
	reg *lora.Registry
	man *lora.Manager
}

func newEnv(t testing.TB, c envConfig) *env {
	t.Helper()
	e := &env{dir: c.dir}
	if e.dir == "" {
		e.dir = t.TempDir()
	}
	var err error
	if e.db, err = badger.Open(badger.Options{Dir: e.dir, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if e.mem, err = textmem.Open(e.db, textmem.Options{}); err != nil {
		t.Fatal(err)
	}
	if e.kv, err = kvcache.Open(e.db, kvcache.Options{}); err != nil {
		t.Fatal(err)
	}
	o := c.opts
	o.DB, o.Store, o.KV = e.db, e.mem, e.kv
	if c.tiers {
		tiers, err := scheduler.NewTiers(e.db, scheduler.ViewRunner(e.mem, e.kv), scheduler.TierOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tiers.Close() })
		o.Tiers = tiers
	}
	if o.Embedder == nil && !c.noEmbed {
		o.Embedder, _ = embed.NewHash(64)
	}
	if o.MinPersistTokens == 0 {
		o.MinPersistTokens = 1
	}
	if e.srv, err = New(o); err != nil {
		t.Fatal(err)
	}
	if !c.noEngine {
		nctx, nseq := c.nctx, c.nseq
		if nctx == 0 {
			nctx = 2048
		}
		if nseq == 0 {
			nseq = 4
		}
		model, threads := c.model, c.threads
		if model == "" {
			model = testmodels.Stories(t)
		}
		if threads == 0 {
			threads = 2
		}
		e.eng, err = runtime.Load(context.Background(), runtime.Options{ModelPath: model, NCtx: nctx, NSeqMax: nseq, Threads: threads,
			NGPULayers: c.ngl, LibDir: c.libDir, LoRA: c.lora})
		if err != nil {
			t.Fatal(err)
		}
		eo := c.eo
		if c.lora {
			if e.reg, err = lora.NewRegistry(e.db, lora.RegistryOptions{}); err != nil {
				t.Fatal(err)
			}
			if e.man, err = lora.NewManager(e.eng.Model(), model, e.reg, lora.Options{Detach: e.eng.DetachAdapter}); err != nil {
				t.Fatal(err)
			}
			eo.Adapters = e.man
		}
		if eo.Name == "" {
			eo.Name = testModel
		}
		if err := e.srv.UseEngine(e.eng, eo); err != nil {
			t.Fatal(err)
		}
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
	if e.man != nil {
		e.man.Close()
	}
	if e.eng != nil {
		if err := e.eng.Close(); err != nil {
			t.Errorf("engine Close: %v", err)
		}
	}
	e.kv.Close()
	if err := e.mem.Close(); err != nil {
		t.Errorf("store Close: %v", err)
	}
	if err := e.db.Close(); err != nil {
		t.Errorf("db Close: %v", err)
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
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, u, b, err)
		}
	}
	return resp.StatusCode
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
