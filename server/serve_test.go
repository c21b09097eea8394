package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/layout"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
)

// TestRepeatLastN: Ollama's -1 (num_ctx) and 0 (off) keep their meaning;
// -1 once panicked in the sampler and killed the server; a window past the
// context is cut to it (1e9 once cost 4 GB of RSS for one request).
func TestRepeatLastN(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 256})
	gen := func(opts map[string]any) string {
		t.Helper()
		opts["temperature"] = 0
		opts["num_predict"] = 48
		var body struct{ Response string }
		req := map[string]any{"model": testModel, "prompt": "Once upon a time", "stream": false, "options": opts}
		if code := do(t, "POST", e.url()+"/api/generate", req, &body); code != http.StatusOK {
			t.Fatalf("options %v: status %d %v", opts, code, body)
		}
		return body.Response
	}
	whole := gen(map[string]any{"repeat_last_n": -1, "repeat_penalty": 5.0})
	if want := gen(map[string]any{"repeat_last_n": 256, "repeat_penalty": 5.0}); whole != want {
		t.Fatalf("repeat_last_n -1 gave %q, num_ctx (256) gave %q", whole, want)
	}
	// a window past the context is the context: 2^32 is answered (the
	// sampler takes at most 2^31 - 1) as num_ctx, without allocating it
	if huge := gen(map[string]any{"repeat_last_n": int64(1) << 32, "repeat_penalty": 5.0}); huge != whole {
		t.Fatalf("repeat_last_n 2^32 gave %q, num_ctx (256) gave %q", huge, whole)
	}
	off := gen(map[string]any{"repeat_last_n": 0, "repeat_penalty": 5.0})
	if want := gen(map[string]any{"repeat_penalty": 1}); off != want {
		t.Fatalf("repeat_last_n 0 gave %q, repeat_penalty 1 gave %q", off, want)
	}
	if whole == off {
		t.Fatalf("the penalty over the whole context changed nothing: %q", whole)
	}
}

// TestNumPredict: Ollama's num_predict meanings. 0 or absent takes the
// server default; -1 (no cap) and -2 (fill the context) run past it to the
// context's end or an end of generation; below -2 is a 400 naming the field.
func TestNumPredict(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 256, mo: memosrt.Options{DefaultNumPredict: 8}})
	type result struct {
		Response   string
		DoneReason string `json:"done_reason"`
		EvalCount  int    `json:"eval_count"`
	}
	gen := func(n *int) (result, int) {
		t.Helper()
		opts := map[string]any{"temperature": 0}
		if n != nil {
			opts["num_predict"] = *n
		}
		var r result
		code := do(t, "POST", e.url()+"/api/generate", map[string]any{"model": testModel, "prompt": "Once upon a time",
			"stream": false, "options": opts}, &r)
		return r, code
	}
	n := func(v int) *int { return &v }
	def, code := gen(nil)
	if code != http.StatusOK || def.EvalCount != 8 || def.DoneReason != "length" {
		t.Fatalf("default: %d %+v, want 8 tokens (DefaultNumPredict)", code, def)
	}
	if zero, _ := gen(n(0)); zero.Response != def.Response || zero.EvalCount != 8 {
		t.Fatalf("num_predict 0 %+v, absent %+v", zero, def)
	}
	fill, _ := gen(n(-2))
	if fill.EvalCount <= 8 || !strings.HasPrefix(fill.Response, def.Response) ||
		(fill.DoneReason == "length" && 5+fill.EvalCount != 256) { // "Once upon a time": 5 prompt tokens
		t.Fatalf("num_predict -2: %+v (default gave %+v)", fill, def)
	}
	if inf, _ := gen(n(-1)); inf.Response != fill.Response || inf.EvalCount != fill.EvalCount {
		t.Fatalf("num_predict -1 %+v, -2 %+v", inf, fill)
	}
	var bad map[string]any
	if code := do(t, "POST", e.url()+"/api/generate", map[string]any{"model": testModel, "prompt": "a", "stream": false,
		"options": map[string]any{"num_predict": -3}}, &bad); code != http.StatusBadRequest ||
		!strings.HasPrefix(bad["error"].(string), "options.num_predict:") {
		t.Fatalf("num_predict -3: %d %v", code, bad)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 256})
	long := strings.Repeat("the cat sat on the mat. ", 200)
	chat := func(extra map[string]any) map[string]any {
		m := map[string]any{"model": testModel, "messages": []map[string]any{{"role": "user", "content": "Hi"}}, "stream": false}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name, path string
		body       any
		code       int
		field      string // in the message (Ollama) or param (OpenAI)
	}{
		{"ollama option type", "/api/chat", chat(map[string]any{"options": map[string]any{"temperature": "hot"}}), 400, "options.temperature"},
		{"ollama option range", "/api/chat", chat(map[string]any{"options": map[string]any{"top_p": 2}}), 400, "options.top_p"},
		{"ollama repeat_last_n below -1", "/api/chat", chat(map[string]any{"options": map[string]any{"repeat_last_n": -2}}), 400, "options.repeat_last_n"},
		{"ollama role", "/api/chat", chat(map[string]any{"messages": []map[string]any{{"role": "robot", "content": "x"}}}), 400, "messages[0].role"},
		{"ollama stream type", "/api/chat", chat(map[string]any{"stream": "yes"}), 400, "stream"},
		{"ollama format", "/api/chat", chat(map[string]any{"format": "yaml"}), 400, "format"},
		{"ollama format schema", "/api/generate", map[string]any{"model": testModel, "prompt": "a", "format": map[string]any{"$ref": "#/x"}}, 400, "format"},
		{"ollama prompt too long", "/api/chat", chat(map[string]any{"messages": []map[string]any{{"role": "user", "content": long}}}), 400, "messages"},
		{"ollama unknown model", "/api/chat", chat(map[string]any{"model": "llama9"}), 404, ""},
		{"ollama unknown cube", "/api/chat", chat(map[string]any{"options": map[string]any{"cube": "ghost"}}), 404, ""},
		{"ollama bad cube", "/api/chat", chat(map[string]any{"options": map[string]any{"cube": "a b"}}), 400, "options.cube"},
		{"openai temperature", "/v1/chat/completions", chat(map[string]any{"temperature": 3}), 400, "temperature"},
		{"openai n", "/v1/chat/completions", chat(map[string]any{"n": 2}), 400, "n"},
		{"openai no messages", "/v1/chat/completions", chat(map[string]any{"messages": []any{}}), 400, "messages"},
		{"openai image part", "/v1/chat/completions", chat(map[string]any{"messages": []map[string]any{{"role": "user",
			"content": []map[string]any{{"type": "image_url", "image_url": map[string]string{"url": "x"}}}}}}), 400, "messages[0].content[0].type"},
		{"openai response_format", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "xml"}}), 400, "response_format.type"},
		{"openai json_schema without schema", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x"}}}), 400, "response_format.json_schema.schema"},
		{"openai json_schema null", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": nil}}}), 400, "response_format.json_schema.schema"},
		{"openai json_schema string", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": "json"}}}), 400, "response_format.json_schema.schema"},
		{"openai json_schema unsupported", "/v1/chat/completions", chat(map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "x", "schema": map[string]any{"type": "string", "pattern": "^a+$"}}}}), 400, "response_format.json_schema.schema"},
		{"openai max_tokens type", "/v1/chat/completions", chat(map[string]any{"max_tokens": "many"}), 400, "max_tokens"},
		{"openai unknown model", "/v1/chat/completions", chat(map[string]any{"model": "gpt-9"}), 404, ""},
		{"openai embeddings format", "/v1/embeddings", map[string]any{"model": "x", "input": "a", "encoding_format": "hex"}, 400, "encoding_format"},
		{"openai completion echo", "/v1/completions", map[string]any{"model": testModel, "prompt": "a", "echo": true}, 400, "echo"},
		{"not found", "/api/nothing", map[string]any{}, 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body map[string]any
			code := do(t, "POST", e.url()+c.path, c.body, &body)
			if code != c.code {
				t.Fatalf("status %d, want %d: %v", code, c.code, body)
			}
			if c.field == "" {
				return
			}
			if strings.HasPrefix(c.path, "/api/") {
				if msg, _ := body["error"].(string); !strings.HasPrefix(msg, c.field+":") {
					t.Fatalf("error %q does not name %s", msg, c.field)
				}
				return
			}
			eb, _ := body["error"].(map[string]any)
			if p, _ := eb["param"].(string); p != c.field {
				t.Fatalf("param %q, want %q (%v)", p, c.field, eb["message"])
			}
		})
	}
	t.Run("too large", func(t *testing.T) {
		s := newEnv(t, envConfig{noEngine: true, opts: Options{MaxBodyBytes: 1024}})
		if code := do(t, "POST", s.url()+"/api/chat", chat(map[string]any{"messages": []map[string]any{{"role": "user", "content": long}}}), nil); code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d", code)
		}
	})
	t.Run("loading", func(t *testing.T) {
		s := newEnv(t, envConfig{noEngine: true})
		var body map[string]any
		if code := do(t, "POST", s.url()+"/api/chat", chat(nil), &body); code != http.StatusServiceUnavailable {
			t.Fatalf("status %d %v", code, body)
		}
		if code := do(t, "GET", s.url()+"/api/tags", nil, &body); code != http.StatusOK {
			t.Fatalf("tags while loading: %d", code)
		}
		if code := do(t, "POST", s.url()+"/v1/cubes", map[string]string{"name": "early"}, nil); code != http.StatusCreated {
			t.Fatalf("memory API while loading: %d", code)
		}
	})
	t.Run("no embedder: the loaded model embeds", func(t *testing.T) {
		s := newEnv(t, envConfig{noEmbed: true})
		var body struct{ Embeddings [][]float32 }
		if code := do(t, "POST", s.url()+"/api/embed", map[string]any{"model": testModel, "input": []string{"Lily has a dog.", "Lily has a dog."}}, &body); code != http.StatusOK {
			t.Fatalf("status %d %v", code, body)
		}
		want, err := s.eng.Embed(context.Background(), []string{"Lily has a dog."})
		if err != nil {
			t.Fatal(err)
		}
		if len(body.Embeddings) != 2 || !slices.Equal(body.Embeddings[0], want[0]) || !slices.Equal(body.Embeddings[1], want[0]) {
			t.Fatalf("embeddings %v, engine %v", body.Embeddings, want)
		}
	})
	t.Run("token", func(t *testing.T) {
		s := newEnv(t, envConfig{noEngine: true, opts: Options{Token: "sesame"}})
		if code := do(t, "GET", s.url()+"/api/tags", nil, nil); code != http.StatusUnauthorized {
			t.Fatalf("no token: %d", code)
		}
		if code := do(t, "GET", s.url()+"/api/tags", nil, nil, "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token: %d", code)
		}
		if code := do(t, "GET", s.url()+"/api/tags", nil, nil, "Authorization", "Bearer sesame"); code != http.StatusOK {
			t.Fatalf("token: %d", code)
		}
		// readiness probes need none and reveal only the version
		for _, p := range []string{"/", "/api/version"} {
			if code := do(t, "GET", s.url()+p, nil, nil); code != http.StatusOK {
				t.Fatalf("GET %s without a token: %d", p, code)
			}
		}
		var v map[string]string
		if do(t, "GET", s.url()+"/api/version", nil, &v); v["version"] != OllamaAPIVersion || v["memosrt"] == "" {
			t.Fatalf("/api/version %v", v)
		}
		for _, p := range []string{"/v1/server", "/v1/cubes", "/metrics"} {
			if code := do(t, "GET", s.url()+p, nil, nil); code != http.StatusUnauthorized {
				t.Fatalf("GET %s without a token: %d", p, code)
			}
		}
	})
}

// A full queue answers 429 at once; a bad request never disturbs one in
// flight; a client that goes away frees its slot.
func TestQueueAndCancel(t *testing.T) {
	e := newEnv(t, envConfig{nseq: 1, mo: memosrt.Options{MaxQueue: -1}})
	ctx := context.Background()
	req := map[string]any{"model": testModel, "prompt": "Once upon a time", "raw": true, "options": greedyOpts(48)}

	t.Run("429", func(t *testing.T) {
		// a stream holds the only slot; nobody may wait for it
		hold, cancel := context.WithCancel(ctx)
		l := stream(t, hold, e.url()+"/api/generate", map[string]any{"model": testModel, "prompt": "Once upon a time", "raw": true, "options": greedyOpts(1500)})
		if _, ok := l.next(); !ok {
			t.Fatal("no first line")
		}
		var body map[string]any
		code := do(t, "POST", e.url()+"/api/generate", req, &body)
		cancel()
		l.close()
		if code != http.StatusTooManyRequests {
			t.Fatalf("status %d %v", code, body)
		}
		testutil.WaitFor(t, "the cancelled stream to free its slot", func() bool { return e.os.Stats().BusySlots == 0 })
		var oe oaiError
		code = do(t, "POST", e.url()+"/v1/chat/completions", map[string]any{"model": testModel, "max_tokens": 4, "messages": []map[string]string{{"role": "user", "content": "x"}}}, &oe)
		if code != http.StatusOK {
			t.Fatalf("after release: %d %+v", code, oe)
		}
	})

	t.Run("bad requests beside a stream", func(t *testing.T) {
		want := streamText(t, e, req)
		l := stream(t, ctx, e.url()+"/api/generate", req)
		defer l.close()
		var got strings.Builder
		first, ok := l.next()
		if !ok {
			t.Fatal("no first line")
		}
		got.WriteString(first["response"].(string))
		for _, bad := range []string{`{`, `{"model":"stories260K","prompt":"x","options":{"seed":"x"}}`, `{"model":"nope","prompt":"x"}`} {
			if code := do(t, "POST", e.url()+"/api/generate", bad, nil); code/100 != 4 {
				t.Fatalf("bad request got %d", code)
			}
		}
		for {
			m, ok := l.next()
			if !ok {
				break
			}
			if m["error"] != nil {
				t.Fatalf("stream error %v", m["error"])
			}
			got.WriteString(m["response"].(string))
		}
		if got.String() != want {
			t.Fatalf("stream beside bad requests %q, alone %q", got.String(), want)
		}
	})

	t.Run("disconnect frees the slot", func(t *testing.T) {
		e2 := newEnv(t, envConfig{nseq: 1, mo: memosrt.Options{MaxQueue: 1}})
		long := map[string]any{"model": testModel, "prompt": "Once upon a time", "raw": true, "options": greedyOpts(1500)}
		cctx, cancel := context.WithCancel(ctx)
		l := stream(t, cctx, e2.url()+"/api/generate", long)
		if _, ok := l.next(); !ok {
			t.Fatal("no first line")
		}
		cancel()
		l.close()
		// this request waits in the queue for the slot the first one held
		// (a generous deadline, not a timing assertion)
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Minute)
		defer wcancel()
		text := streamTextCtx(t, wctx, e2, req)
		if text == "" {
			t.Fatal("empty answer")
		}
		mustMetric(t, e2, "memosrt_canceled_requests_total", 1)
	})
}

func streamText(t *testing.T, e *env, req map[string]any) string {
	return streamTextCtx(t, context.Background(), e, req)
}

func streamTextCtx(t *testing.T, ctx context.Context, e *env, req map[string]any) string {
	t.Helper()
	l := stream(t, ctx, e.url()+"/api/generate", req)
	defer l.close()
	if l.resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", l.resp.StatusCode)
	}
	var out strings.Builder
	for {
		m, ok := l.next()
		if !ok {
			return out.String()
		}
		if m["error"] != nil {
			t.Fatalf("stream error %v", m["error"])
		}
		out.WriteString(m["response"].(string))
	}
}

// mustMetric checks a metric's value in /metrics.
func mustMetric(t *testing.T, e *env, name string, want float64) {
	t.Helper()
	if got := readMetric(t, e, name); got != want {
		t.Fatalf("%s = %v, want %v", name, got, want)
	}
}

// readMetric returns an unlabelled metric's value from /metrics.
func readMetric(t *testing.T, e *env, name string) float64 {
	t.Helper()
	resp, err := http.Get(e.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var got float64
			fmt.Sscan(v, &got)
			return got
		}
	}
	t.Fatalf("metric %s missing", name)
	return 0
}

// A conversation's state is saved as a pack; after a restart (new engine,
// same data directory) the second turn restores it.
func TestConversationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, envConfig{dir: dir})
	addCube(t, e, "lily", lilyMemories...)
	c := openaiClient(e.url(), option.WithHeader(CubeHeader, "lily"))
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(24), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Lily and Max went to the park")}}
	r1, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	e.close(t) // waits for the pack write
	e2 := newEnv(t, envConfig{dir: dir})
	var ps memosrt.PackStatus
	do(t, "GET", e2.url()+"/v1/cubes/lily/pack", nil, &ps)
	if len(ps.Packs) != 1 || ps.Packs[0].Label != "conv:lily" {
		t.Fatalf("packs after restart %+v", ps.Packs)
	}
	c2 := openaiClient(e2.url(), option.WithHeader(CubeHeader, "lily"))
	p.Messages = append(p.Messages, openai.AssistantMessage(r1.Choices[0].Message.Content), openai.UserMessage("Max barked"))
	r2, err := c2.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Usage.PromptTokensDetails.CachedTokens; got < r1.Usage.PromptTokens-1 {
		t.Fatalf("restored %d tokens, first turn's prompt was %d", got, r1.Usage.PromptTokens)
	}
	// the new turn's pack replaces the old one
	e2.close(t)
	e3 := newEnv(t, envConfig{dir: dir})
	do(t, "GET", e3.url()+"/v1/cubes/lily/pack", nil, &ps)
	if len(ps.Packs) != 1 || int64(ps.Packs[0].NTokens) <= r1.Usage.PromptTokens+r1.Usage.CompletionTokens-1 {
		t.Fatalf("packs after turn 2 %+v", ps.Packs)
	}
}

// A resident pack is shared into request sequences (no restore) and its
// cells are reported against n_ctx.
func TestResidentPack(t *testing.T) {
	e := newEnv(t, envConfig{mo: memosrt.Options{Parallel: 2, ResidentSeqs: 1, NoPersist: true}})
	addCube(t, e, "lily", lilyMemories...)
	var ps memosrt.PackStatus
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/pack", map[string]any{"resident": true}, &ps); code != http.StatusOK {
		t.Fatalf("warm: %d", code)
	}
	if ps.Resident == nil || ps.Resident.Seq != 2 || ps.Resident.Tokens != ps.Packs[0].NTokens || ps.ResidentCells != ps.Resident.Tokens {
		t.Fatalf("status %+v", ps)
	}
	mustMetric(t, e, "memosrt_kv_resident_cells", float64(ps.Resident.Tokens))
	c := openaiClient(e.url(), option.WithHeader(CubeHeader, "lily"))
	ctx := context.Background()
	// two different questions: neither slot holds the prompt, both share the pack
	for i, q := range []string{"Where is Max?", "What does Lily eat?"} {
		r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(8), Temperature: openai.Float(0),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(q)}})
		if err != nil {
			t.Fatal(err)
		}
		// the second question may reuse the first's slot, which holds the
		// pack and a little more
		if got := r.Usage.PromptTokensDetails.CachedTokens; got < int64(ps.Resident.Tokens) || i == 0 && got != int64(ps.Resident.Tokens) {
			t.Fatalf("%q: cached %d, resident pack %d", q, got, ps.Resident.Tokens)
		}
	}
	// deleting the cube frees the resident sequence
	do(t, "DELETE", e.url()+"/v1/cubes/lily", nil, nil)
	mustMetric(t, e, "memosrt_kv_resident_cells", 0)
}

// The fallback passes long lines whole and fails loudly on lines the
// official client cannot read (over 8 MiB), never returning a cut answer.
func TestFallbackLongLines(t *testing.T) {
	for _, c := range []struct {
		name string
		size int
		ok   bool
	}{{"600KB", 600 << 10, true}, {"9MB", 9 << 20, false}} {
		t.Run(c.name, func(t *testing.T) {
			text := strings.Repeat("a", c.size)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				enc := json.NewEncoder(w)
				enc.Encode(map[string]any{"model": "m", "message": map[string]string{"role": "assistant", "content": "start "}, "done": false})
				enc.Encode(map[string]any{"model": "m", "message": map[string]string{"role": "assistant", "content": text}, "done": false})
				enc.Encode(map[string]any{"model": "m", "message": map[string]string{"role": "assistant", "content": ""}, "done": true, "done_reason": "stop", "eval_count": 2})
			}))
			defer up.Close()
			f := newEnv(t, envConfig{noEngine: true, opts: Options{MaxBodyBytes: 1 << 20},
				mo: memosrt.Options{Upstream: &memosrt.UpstreamOptions{URL: up.URL, Model: "m"}}})
			var body map[string]any
			code := do(t, "POST", f.url()+"/v1/chat/completions", map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": "x"}}}, &body)
			if !c.ok {
				if code != http.StatusBadGateway {
					t.Fatalf("status %d, want 502", code)
				}
				return
			}
			if code != http.StatusOK {
				t.Fatalf("status %d %v", code, body)
			}
			got := body["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"].(string)
			if got != "start "+text {
				t.Fatalf("content of %d bytes, want %d", len(got), len(text)+6)
			}
		})
	}
}

// num_ctx and sampling options change per request without a reload.
func TestNumCtxPerRequest(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	eng := e.eng
	for _, n := range []int{64, 512, 8192, 0} {
		var r map[string]any
		body := map[string]any{"model": testModel, "prompt": "Once upon a time", "raw": true, "stream": false,
			"options": map[string]any{"num_ctx": n, "num_predict": 200, "temperature": 0.5, "top_k": 10, "seed": 3}}
		if code := do(t, "POST", e.url()+"/api/generate", body, &r); code != http.StatusOK {
			t.Fatalf("num_ctx %d: %d %v", n, code, r)
		}
		got := len(r["context"].([]any)) // tokens the sequence holds
		if n == 64 && got > 64 {
			t.Fatalf("num_ctx 64: sequence holds %d tokens", got)
		}
	}
	if e.os.Engine() != eng {
		t.Fatal("engine replaced")
	}
	var ps struct {
		Models []struct {
			ContextLength int `json:"context_length"`
		}
	}
	do(t, "GET", e.url()+"/api/ps", nil, &ps)
	if len(ps.Models) != 1 || ps.Models[0].ContextLength != 512 {
		t.Fatalf("ps %+v", ps)
	}
}

// With a chat template the cube's pack (as `kv warm` computes it) is a
// prefix of chat prompts, and a conversation's turns extend each other.
func TestChatTemplate(t *testing.T) {
	e := newEnv(t, envConfig{mo: memosrt.Options{Layout: layout.Options{ChatTemplate: "chatml"}, NoPersist: true}})
	addCube(t, e, "lily", lilyMemories...)
	var ps memosrt.PackStatus
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/pack", nil, &ps); code != http.StatusOK {
		t.Fatalf("warm: %d", code)
	}
	var r map[string]any
	body := map[string]any{"model": testModel, "stream": false, "_debug_render_only": true, "options": map[string]any{"cube": "lily"},
		"messages": []map[string]string{{"role": "user", "content": "Where is Max?"}}}
	do(t, "POST", e.url()+"/api/chat", body, &r)
	rendered := r["_debug_info"].(map[string]any)["rendered_template"].(string)
	if !strings.HasPrefix(rendered, "<|im_start|>system\n") || !strings.Contains(rendered, lilyMemories[1]) || !strings.HasSuffix(rendered, "<|im_start|>assistant\n") {
		t.Fatalf("rendered %q", rendered)
	}
	// the warm's slot holds the pack: the first turn reuses it
	c := openaiClient(e.url(), option.WithHeader(CubeHeader, "lily"))
	ctx := context.Background()
	p := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(12), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where is Max?")}}
	r1, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := r1.Usage.PromptTokensDetails.CachedTokens; got != int64(ps.Packs[0].NTokens) {
		t.Fatalf("first turn cached %d, pack has %d tokens", got, ps.Packs[0].NTokens)
	}
	p.Messages = append(p.Messages, openai.AssistantMessage(r1.Choices[0].Message.Content), openai.UserMessage("And Lily?"))
	r2, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Usage.PromptTokensDetails.CachedTokens; got < r1.Usage.PromptTokens {
		t.Fatalf("second turn cached %d, first prompt %d", got, r1.Usage.PromptTokens)
	}
}

// Ollama's /api/generate context continues the previous exchange; the
// slot still holds it, so only the new prompt is decoded.
func TestGenerateContext(t *testing.T) {
	e := newEnv(t, envConfig{})
	var r1, r2 struct {
		Response        string `json:"response"`
		Context         []int  `json:"context"`
		PromptEvalCount int    `json:"prompt_eval_count"`
		Cached          int    `json:"prompt_cached_count"`
	}
	body := map[string]any{"model": testModel, "prompt": "Once upon a time", "stream": false, "options": greedyOpts(12)}
	if code := do(t, "POST", e.url()+"/api/generate", body, &r1); code != http.StatusOK || len(r1.Context) == 0 {
		t.Fatalf("turn 1: %d %+v", code, r1)
	}
	body["prompt"], body["context"] = "The dog", r1.Context
	if code := do(t, "POST", e.url()+"/api/generate", body, &r2); code != http.StatusOK {
		t.Fatalf("turn 2: %d", code)
	}
	if len(r2.Context) <= len(r1.Context) || !slices.Equal(r2.Context[:len(r1.Context)], r1.Context) {
		t.Fatalf("context %v does not extend %v", r2.Context, r1.Context)
	}
	// Ollama's count is the whole prompt; memosrt's cached count the part
	// not decoded
	if r2.PromptEvalCount <= len(r1.Context) || r2.PromptEvalCount-r2.Cached > 8 {
		t.Fatalf("turn 2: prompt %d tokens, %d cached (context %d)", r2.PromptEvalCount, r2.Cached, len(r1.Context))
	}
	body["context"] = []int{1, 1 << 30}
	var oe map[string]any
	if code := do(t, "POST", e.url()+"/api/generate", body, &oe); code != http.StatusBadRequest || !strings.HasPrefix(oe["error"].(string), "context[1]") {
		t.Fatalf("bad context: %d %v", code, oe)
	}
}

// One cube's state never serves another: a guessed memory in cube mallory
// gets no cached tokens from cube alice's pack, slot or resident state,
// whether the guess is right or wrong.
func TestCubeIsolation(t *testing.T) {
	e := newEnv(t, envConfig{mo: memosrt.Options{Parallel: 2, ResidentSeqs: 1}})
	addCube(t, e, "alice", "Alice's PIN is 4821.", "Alice likes tea.")
	if code := do(t, "POST", e.url()+"/v1/cubes/alice/pack", map[string]any{"resident": true}, nil); code != http.StatusOK {
		t.Fatalf("warm alice: %d", code)
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/alice/pack", nil, nil); code != http.StatusOK {
		t.Fatalf("warm alice: %d", code)
	}
	ask := func(cube string) int64 {
		c := openaiClient(e.url(), option.WithHeader(CubeHeader, cube))
		r, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(4),
			Temperature: openai.Float(0), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Usage.PromptTokensDetails.CachedTokens
	}
	if n := ask("alice"); n < 10 {
		t.Fatalf("alice's own pack: %d cached", n)
	}
	for _, guess := range []string{"Alice's PIN is 4821.", "Alice's PIN is 1111."} {
		addCube(t, e, "mallory", guess)
		if n := ask("mallory"); n != 0 {
			t.Errorf("guess %q: %d tokens cached from another cube", guess, n)
		}
		do(t, "DELETE", e.url()+"/v1/cubes/mallory", nil, nil)
	}
}

// Over HTTP every KV source gives the cold output: the resident pack
// shared in, the slot's previous turn, and the conversation pack restored
// after a restart (POST /v1/generate reports the source; no_cache is the
// cold prefill).
func TestEveryKVSourceEqualsColdHTTP(t *testing.T) {
	dir := t.TempDir()
	opts := memosrt.Options{Parallel: 1, ResidentSeqs: 1}
	e := newEnv(t, envConfig{dir: dir, mo: opts})
	addCube(t, e, "lily", lilyMemories...)
	addCube(t, e, "other", "Tom has a kite.")
	gen := func(e *env, cube string, msgs []memosrt.Message, noCache bool) memosrt.Response {
		t.Helper()
		var r memosrt.Response
		// a cold run saves no conversation pack: it would be a longer source
		in := map[string]any{"cube": cube, "messages": msgs, "num_predict": 24, "no_cache": noCache, "no_persist": noCache}
		if code := do(t, "POST", e.url()+"/v1/generate", in, &r); code != http.StatusOK {
			t.Fatalf("generate: %d", code)
		}
		return r
	}
	turn := []memosrt.Message{{Role: "user", Content: "Once upon a time, Lily"}}
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/pack", map[string]any{"resident": true}, nil); code != http.StatusOK {
		t.Fatalf("warm: %d", code)
	}
	cold := gen(e, "lily", turn, true)                                        // the same prompt: the pack holds the memories now
	gen(e, "other", []memosrt.Message{{Role: "user", Content: "Tom"}}, false) // the only slot now holds another cube
	for _, want := range []string{memosrt.SourceResident, memosrt.SourceSlot} {
		if r := gen(e, "lily", turn, false); r.CacheSource != want || r.Text != cold.Text || r.Usage.CachedTokens == 0 {
			t.Fatalf("%s: source %q, %d cached, %q; cold %q", want, r.CacheSource, r.Usage.CachedTokens, r.Text, cold.Text)
		}
	}
	turn2 := append(slices.Clone(turn), memosrt.Message{Role: "assistant", Content: cold.Text}, memosrt.Message{Role: "user", Content: "Then Max"})
	cold2 := gen(e, "lily", turn2, true)
	e.close(t)
	e2 := newEnv(t, envConfig{dir: dir, mo: opts})
	if r := gen(e2, "lily", turn2, false); r.CacheSource != memosrt.SourceRestored || r.Text != cold2.Text {
		t.Fatalf("after the restart: source %q, %d cached, %q; cold %q", r.CacheSource, r.Usage.CachedTokens, r.Text, cold2.Text)
	}
}
