package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// upstreamProxy sits between two serves and keeps the last request the
// second sent upstream (its body and Authorization) and the first's answer.
type upstreamProxy struct {
	ts           *httptest.Server
	mu           sync.Mutex // guards the fields below
	auth         string
	sent, answer []byte
}

func newUpstreamProxy(t *testing.T, target string) *upstreamProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &upstreamProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	// the answer is kept before any of it reaches the second serve
	rp.ModifyResponse = func(r *http.Response) error {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(b))
		p.mu.Lock()
		p.answer = b
		p.mu.Unlock()
		return err
	}
	p.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		p.mu.Lock()
		p.sent, p.auth = b, r.Header.Get("Authorization")
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.ts.Close)
	return p
}

func (p *upstreamProxy) last() (auth string, sent, answer []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.auth, p.sent, p.answer
}

// oaiUsage is an OpenAI usage object.
type oaiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// chatAnswer reads a chat completion, one JSON object or an SSE stream:
// its text and its usage (nil without one).
func chatAnswer(t *testing.T, b []byte) (string, *oaiUsage) {
	t.Helper()
	var text strings.Builder
	var usage *oaiUsage
	add := func(raw []byte) {
		var m struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
				Delta   struct{ Content string } `json:"delta"`
			} `json:"choices"`
			Usage *oaiUsage `json:"usage"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("answer %q: %v", raw, err)
		}
		for _, c := range m.Choices {
			text.WriteString(c.Message.Content + c.Delta.Content)
		}
		if m.Usage != nil {
			usage = m.Usage
		}
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		add(b)
		return text.String(), usage
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" {
			add([]byte(d))
		}
	}
	return text.String(), usage
}

// post sends a JSON body and returns the status and the raw answer.
func (p *serveProc) post(t *testing.T, path string, in any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(in)
	resp, err := http.Post(p.url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// `memosrt serve --backend openai:URL` against a second `memosrt serve`
// (its OpenAI routes, behind --token): the cube's memory is in what the
// upstream received, the usage reported is the upstream's exactly,
// streamed and not, and the key from MEMOSRT_UPSTREAM_API_KEY is what
// lets it in.
func TestServeOpenAIBackend(t *testing.T) {
	first := startServe(t, t.TempDir(), nil, "--token", "sekret")
	proxy := newUpstreamProxy(t, first.url)
	second := startProc(t, []string{"MEMOSRT_UPSTREAM_API_KEY=sekret", "OPENAI_API_KEY="}, "serve", "--db", t.TempDir(),
		"--addr", "127.0.0.1:0", "--backend", "openai:"+proxy.ts.URL, "--upstream-model", "stories260K")
	if !strings.Contains(second.stderr.String(), "(openai backend, model stories260K)") {
		t.Fatalf("ready line:\n%s", second.stderr.String())
	}
	memory := "Max is brown and likes to run in the park."
	if code := second.call(t, "POST", "/v1/cubes", map[string]string{"name": "lily"}, nil); code != http.StatusCreated {
		t.Fatalf("create cube: %d", code)
	}
	if code := second.call(t, "POST", "/v1/cubes/lily/memories", map[string]string{"text": memory}, nil); code != http.StatusCreated {
		t.Fatalf("add memory: %d", code)
	}
	chat := map[string]any{"model": "stories260K", "cube": "lily", "max_tokens": 12, "temperature": 0,
		"messages": []map[string]string{{"role": "user", "content": "Where does Max run?"}}}
	var whole string
	for _, stream := range []bool{false, true} {
		chat["stream"] = stream
		if stream {
			chat["stream_options"] = map[string]bool{"include_usage": true}
		}
		code, b := second.post(t, "/v1/chat/completions", chat)
		if code != http.StatusOK {
			t.Fatalf("stream %v: %d %s", stream, code, b)
		}
		text, usage := chatAnswer(t, b)
		auth, sent, answer := proxy.last()
		upText, upUsage := chatAnswer(t, answer)
		if auth != "Bearer sekret" || !strings.Contains(string(sent), memory) {
			t.Fatalf("stream %v: upstream got Authorization %q and %s", stream, auth, sent)
		}
		if usage == nil || upUsage == nil || *usage != *upUsage || usage.PromptTokens == 0 || usage.CompletionTokens == 0 {
			t.Fatalf("stream %v: usage %+v, the upstream's %+v", stream, usage, upUsage)
		}
		if text != upText || text == "" || stream && text != whole {
			t.Fatalf("stream %v: answer %q, the upstream's %q, non-streamed %q", stream, text, upText, whole)
		}
		whole = text
	}

	// without the key the first refuses the second: a 502 that says so
	keyless := startProc(t, []string{"MEMOSRT_UPSTREAM_API_KEY=", "OPENAI_API_KEY="}, "serve", "--db", t.TempDir(),
		"--addr", "127.0.0.1:0", "--backend", "openai:"+first.url+"/v1", "--upstream-model", "stories260K")
	delete(chat, "cube")
	chat["stream"] = false
	code, b := keyless.post(t, "/v1/chat/completions", chat)
	if code != http.StatusBadGateway || !strings.Contains(string(b), "check the upstream API key") {
		t.Fatalf("without the key: %d %s", code, b)
	}
}
