package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/server/wire"
)

// errMessage returns the error text of an Ollama ({"error": "..."}) or
// OpenAI ({"error": {"message": ...}}) error body.
func errMessage(out map[string]any) string {
	switch v := out["error"].(type) {
	case string:
		return v
	case map[string]any:
		m, _ := v["message"].(string)
		return m
	}
	return ""
}

// Invalid UTF-8 and lone surrogate escapes in any string of any JSON body,
// and invalid UTF-8 in the decoded path or a query parameter, are a 400
// naming the field, and nothing is stored; a surrogate pair and plain
// non-ASCII text pass.
func TestInvalidTextRefused(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	addCube(t, e, "a")
	const badUTF8 = "caf\xe9 \xff"
	for _, c := range []struct {
		name, path, body string
		want             int
		msg              string
	}{
		{"memory utf8", "/v1/cubes/a/memories", `{"text":"` + badUTF8 + `"}`, 400, "text: invalid UTF-8 (byte 0xe9 at byte 3)"},
		{"memory high surrogate", "/v1/cubes/a/memories", `{"text":"x\ud800"}`, 400, `text: a lone UTF-16 surrogate \ud800 at byte 1 (not valid text)`},
		{"memory low surrogate", "/v1/cubes/a/memories", `{"text":"\udc00y"}`, 400, `text: a lone UTF-16 surrogate \udc00 at byte 0 (not valid text)`},
		{"memory reversed pair", "/v1/cubes/a/memories", `{"text":"\ude00\ud83d"}`, 400, `text: a lone UTF-16 surrogate \ude00`},
		{"memory tag", "/v1/cubes/a/memories", `{"text":"ok","tags":["t","\ud800"]}`, 400, `tags[1]: a lone UTF-16 surrogate`},
		{"memory batch", "/v1/cubes/a/memories", `{"memories":[{"text":"ok"},{"text":"` + badUTF8 + `"}]}`, 400, "memories[1].text: invalid UTF-8"},
		{"bad key", "/v1/cubes/a/memories", `{"text":"ok","` + badUTF8 + `":1}`, 400, "body: a field name holds invalid UTF-8"},
		{"search", "/v1/cubes/a/search", `{"query":"` + badUTF8 + `"}`, 400, "query: invalid UTF-8"},
		{"cube create", "/v1/cubes", `{"name":"b","description":"\ud800"}`, 400, "description: a lone UTF-16 surrogate"},
		{"ollama chat", "/api/chat", `{"model":"stories260K","messages":[{"role":"user","content":"hi \udbff"}]}`, 400, `messages[0].content: a lone UTF-16 surrogate \udbff`},
		{"ollama generate", "/api/generate", `{"model":"stories260K","prompt":"` + badUTF8 + `"}`, 400, "prompt: invalid UTF-8"},
		{"ollama stop", "/api/generate", `{"model":"stories260K","prompt":"x","options":{"stop":["\ud800"]}}`, 400, "options.stop[0]: a lone"},
		{"openai chat", "/v1/chat/completions", `{"model":"stories260K","messages":[{"role":"user","content":[{"type":"text","text":"` + badUTF8 + `"}]}]}`, 400, "messages[0].content[0].text: invalid UTF-8"},
		{"openai completion", "/v1/completions", `{"model":"stories260K","prompt":"\udfff"}`, 400, "prompt: a lone UTF-16 surrogate"},
		{"native", "/v1/generate", `{"prompt":"` + badUTF8 + `"}`, 400, "prompt: invalid UTF-8"},
		{"messages", "/v1/cubes/a/messages", `{"messages":[{"role":"user","content":"` + badUTF8 + `"}]}`, 400, "messages[0].content: invalid UTF-8"},
		{"mcp", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add_memory","arguments":{"cube":"a","text":"` + badUTF8 + `"}}}`, 400, "params.arguments.text: invalid UTF-8"},
		{"memory pair", "/v1/cubes/a/memories", `{"text":"smile \ud83d\ude00 café"}`, 201, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out map[string]any
			code := do(t, "POST", e.url()+c.path, c.body, &out, "Content-Type", "application/json", "Accept", "application/json, text/event-stream")
			if code != c.want || !strings.Contains(errMessage(out), c.msg) {
				t.Fatalf("%d %q, want %d %q", code, errMessage(out), c.want, c.msg)
			}
			if c.want == 400 && !strings.HasPrefix(c.path, "/api/") {
				field, _, _ := strings.Cut(c.msg, ":")
				if p, _ := out["error"].(map[string]any)["param"].(string); p != field {
					t.Fatalf("param %q, want %q", p, field)
				}
			}
		})
	}
	// the decoded path and query parameters too (%E9 is the byte 0xe9)
	for _, c := range []struct{ method, path, msg string }{
		{"GET", "/v1/cubes/a/search?q=caf%E9", "q: invalid UTF-8 (byte 0xe9 at byte 3)"},
		{"GET", "/v1/cubes/a/search?q=caf%C3%A9&k%FF=1", "query: a parameter name holds invalid UTF-8 (byte 0xff at byte 1)"},
		{"POST", "/v1/cubes/caf%E9/memories", "path: invalid UTF-8 (byte 0xe9 at byte 13)"},
		{"GET", "/v1/cubes/a/memories?limit=%FF", "limit: invalid UTF-8 (byte 0xff at byte 0)"},
	} {
		var out map[string]any
		if code := do(t, c.method, e.url()+c.path, map[string]any{"text": "x"}, &out); code != 400 || errMessage(out) != c.msg {
			t.Errorf("%s %s: %d %q, want 400 %q", c.method, c.path, code, errMessage(out), c.msg)
		}
	}
	var hits struct{ Hits []any }
	if code := do(t, "GET", e.url()+"/v1/cubes/a/search?q=caf%C3%A9", nil, &hits); code != 200 {
		t.Errorf("search for valid text: %d", code)
	}
	// only the valid memory was stored, as sent
	var list struct {
		Memories []struct {
			Text string `json:"text"`
		} `json:"memories"`
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/a/memories", nil, &list); code != 200 || len(list.Memories) != 1 || list.Memories[0].Text != "smile 😀 café" {
		t.Fatalf("memories: %d %+v", code, list.Memories)
	}
}

func TestCheckJSONText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":"x","b":[1,true,null,{"c":"\u00e9\n\"\\"}]}`, ""},
		{`{"a":"\ud83d\ude00"}`, ""},
		{`{"a":{"b":[{"c":"\ud83d"}]}}`, `a.b[0].c: a lone UTF-16 surrogate \ud83d at byte 0 (not valid text)`},
		{`["ok","` + "\xc3" + `"]`, `[1]: invalid UTF-8 (byte 0xc3 at byte 0)`},
		{`"` + "\xed\xa0\x80" + `"`, `body: invalid UTF-8 (byte 0xed at byte 0)`}, // a surrogate encoded as UTF-8
		{`{"a":"\ud800\u0041"}`, `a: a lone UTF-16 surrogate \ud800 at byte 0 (not valid text)`},
		{`{"a":1, "b" : "x\udc00"}`, `b: a lone UTF-16 surrogate \udc00 at byte 1 (not valid text)`},
	} {
		got := ""
		if err := wire.CheckJSONText([]byte(c.in)); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q, want %q", c.in, got, c.want)
		}
		if c.want == "" && !json.Valid([]byte(c.in)) {
			t.Errorf("%s: not JSON", c.in)
		}
	}
}

// A body that stalls (fewer bytes than its Content-Length, or one byte now
// and then) is answered 408 once the body read deadline passes, its
// connection is closed, and /metrics counts it; nothing of it is stored.
// A streamed answer outlives the deadline: it applies to the body only.
func TestBodyReadDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	e := newEnv(t, envConfig{nctx: 512, opts: Options{BodyReadTimeout: deadline}})
	addCube(t, e, "a")
	send := func(t *testing.T, body func(c net.Conn)) {
		t.Helper()
		c, err := net.Dial("tcp", e.ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute)) // a guard against a hung test, not a measure
		if _, err := io.WriteString(c, "POST /v1/cubes/a/memories HTTP/1.1\r\nHost: memosrt\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		go body(c)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out oaiError
		json.Unmarshal(b, &out)
		want := "server: request body not received in time: body: not complete within 200ms (the server's body read deadline)"
		if resp.StatusCode != http.StatusRequestTimeout || !strings.HasPrefix(out.Error.Message, want) {
			t.Fatalf("%d %q, want 408 %q", resp.StatusCode, out.Error.Message, want)
		}
		if !resp.Close {
			t.Fatal("response does not say the connection closes")
		}
		// closed: an end of file, or a reset when bytes were still coming in
		if n, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("connection still open: read %v, %v", n, err)
		}
	}
	t.Run("short body", func(t *testing.T) {
		send(t, func(c net.Conn) { io.WriteString(c, `{"text":"a`) })
	})
	t.Run("trickle", func(t *testing.T) {
		send(t, func(c net.Conn) {
			tick := time.NewTicker(deadline / 4)
			defer tick.Stop()
			for range tick.C {
				if _, err := c.Write([]byte(" ")); err != nil {
					return // closed by the server
				}
			}
		})
	})
	var list struct {
		Memories []any `json:"memories"`
	}
	if code := do(t, "GET", e.url()+"/v1/cubes/a/memories", nil, &list); code != 200 || len(list.Memories) != 0 {
		t.Fatalf("memories: %d %d", code, len(list.Memories))
	}
	resp, err := http.Get(e.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(b)
	if !strings.Contains(metrics, "\nmemosrt_http_body_timeouts_total 2\n") {
		t.Fatalf("metrics lack memosrt_http_body_timeouts_total 2:\n%s", grepLines(metrics, "body_timeouts"))
	}
	// a stream that runs past the deadline ends whole
	ls := stream(t, context.Background(), e.url()+"/api/generate", map[string]any{"model": testModel, "prompt": "Once upon a time",
		"options": map[string]any{"num_predict": 400, "temperature": 0}})
	defer ls.close()
	var last map[string]any
	lines := 0
	for m, ok := ls.next(); ok; m, ok = ls.next() {
		last, lines = m, lines+1
	}
	if last == nil || last["done"] != true || last["eval_count"] != 400.0 {
		t.Fatalf("stream of %d lines ended with %v", lines, last)
	}
	t.Logf("stream: %d lines in %v (deadline %v)", lines, time.Duration(last["total_duration"].(float64)), deadline)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// keep_alive sent through the OpenAI routes sets how long the model stays
// loaded, as on Ollama's (/api/ps shows it), and a bad one is a 400
// naming keep_alive on every route alike.
func TestKeepAliveEverywhere(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	msgs := []map[string]any{{"role": "user", "content": "Hi"}}
	expires := func(t *testing.T) time.Duration {
		t.Helper()
		var ps struct {
			Models []struct {
				ExpiresAt time.Time `json:"expires_at"`
			} `json:"models"`
		}
		if code := do(t, "GET", e.url()+"/api/ps", nil, &ps); code != 200 || len(ps.Models) != 1 {
			t.Fatalf("ps: %d %+v", code, ps)
		}
		return time.Until(ps.Models[0].ExpiresAt)
	}
	for _, c := range []struct {
		name, path string
		body       map[string]any
		want       time.Duration
	}{
		{"chat 24h", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "keep_alive": "24h"}, 24 * time.Hour},
		{"completion 1h", "/v1/completions", map[string]any{"model": testModel, "prompt": "Hi", "max_tokens": 2, "keep_alive": "1h"}, time.Hour},
		{"chat seconds", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "keep_alive": 7200}, 2 * time.Hour},
		{"stream 3h", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "keep_alive": "3h", "stream": true}, 3 * time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			if code := do(t, "POST", e.url()+c.path, c.body, nil); code != 200 {
				t.Fatalf("%d", code)
			}
			// the model's expiry is set when the request ends; a minute
			// either side covers the time this test itself takes
			if got := expires(t); got < c.want-time.Minute || got > c.want+time.Minute {
				t.Fatalf("expires in %v, want %v", got, c.want)
			}
		})
	}
	const msg = `keep_alive: want a duration ("5m", "24h", negative: forever) or a number of seconds, got "bogus"`
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "keep_alive": "bogus"}},
		{"/v1/completions", map[string]any{"model": testModel, "prompt": "Hi", "keep_alive": "bogus"}},
		{"/v1/embeddings", map[string]any{"model": testModel, "input": "Hi", "keep_alive": "bogus"}},
		{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "keep_alive": "bogus"}},
		{"/api/generate", map[string]any{"model": testModel, "prompt": "Hi", "keep_alive": "bogus"}},
		{"/api/embed", map[string]any{"model": testModel, "input": "Hi", "keep_alive": "bogus"}},
		{"/api/embeddings", map[string]any{"model": testModel, "prompt": "Hi", "keep_alive": "bogus"}},
	} {
		var out map[string]any
		if code := do(t, "POST", e.url()+c.path, c.body, &out); code != 400 || errMessage(out) != msg {
			t.Errorf("%s: %d %q, want 400 %q", c.path, code, errMessage(out), msg)
		}
	}
	if got := expires(t); got < 3*time.Hour-time.Minute {
		t.Fatalf("refused requests changed the expiry: %v", got)
	}
	// /v1/embeddings embeds with the chat model when no embedder is set,
	// and keeps it loaded as asked (expires reads this e's /api/ps)
	e = newEnv(t, envConfig{nctx: 512, noEmbed: true})
	if code := do(t, "POST", e.url()+"/v1/embeddings", map[string]any{"model": testModel, "input": "Hi", "keep_alive": "5h"}, nil); code != 200 {
		t.Fatalf("/v1/embeddings: %d", code)
	}
	if got := expires(t); got < 5*time.Hour-time.Minute || got > 5*time.Hour+time.Minute {
		t.Fatalf("/v1/embeddings with keep_alive 5h: expires in %v", got)
	}
}

// An adapter file overwritten in place while the server runs is not used
// with the weights loaded from its old content: the cube's chats answer
// 400 naming adapters until the file is put back.
func TestAdapterRewrittenInPlace(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "persona.gguf")
	if err := lora.WriteRandom(ctx, path, testmodels.Stories(t), lora.RandomSpec{Rank: 4, Std: 0.5, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	addCube(t, e, "lily", lilyMemories...)
	rec, err := e.reg.Add(ctx, lora.AddRequest{Name: "persona", Cube: "lily", Path: path, Default: true})
	if err != nil {
		t.Fatal(err)
	}
	chat := func() (int, map[string]any) {
		var out map[string]any
		code := do(t, "POST", e.url()+"/v1/generate", map[string]any{"cube": "lily", "num_predict": 4,
			"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}}}, &out)
		return code, out
	}
	if code, out := chat(); code != 200 || out["adapters"] != "persona@"+rec.SHA256[:12]+":1" {
		t.Fatalf("before: %d %v", code, out)
	}
	other := filepath.Join(dir, "other.gguf")
	if err := lora.WriteRandom(ctx, other, testmodels.Stories(t), lora.RandomSpec{Rank: 4, Std: 0.5, Seed: 8}); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(path)
	newer, _ := os.ReadFile(other)
	if err := os.WriteFile(path, newer, 0o644); err != nil { // in place: the same inode
		t.Fatal(err)
	}
	code, out := chat()
	msg := errMessage(out)
	if p, _ := out["error"].(map[string]any)["param"].(string); code != 400 || p != "adapters" ||
		!strings.HasPrefix(msg, "lora: adapter file changed since it was registered: "+path+": sha256 ") ||
		!strings.HasSuffix(msg, "registered "+rec.SHA256[:12]) {
		t.Fatalf("rewritten: %d %v", code, out)
	}
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := chat(); code != 200 || out["adapters"] != "persona@"+rec.SHA256[:12]+":1" {
		t.Fatalf("put back: %d %v", code, out)
	}
	// rewritten in place with its old times put back (cp -p over it,
	// touch -r): inode, size and modification time as they were; the
	// change time (ctime), which no one can set, tells
	if err := os.Chtimes(path, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if code, out := chat(); code != 200 {
		t.Fatalf("put back, times restored: %d %v", code, out)
	}
	if err := os.WriteFile(path, newer, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	if code, out := chat(); code != 400 || !strings.HasPrefix(errMessage(out), "lora: adapter file changed since it was registered: ") {
		t.Fatalf("rewritten keeping its times: %d %v", code, out)
	}
}

// Option ranges are checked once (pipeline/request's CheckOptions) for every route,
// with the same message under the field name each route uses.
func TestOptionRangesEverywhere(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512})
	msgs := []map[string]any{{"role": "user", "content": "Hi"}}
	stops := func(n, size int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = strings.Repeat("x", size-1) + string(rune('a'+i%26))
		}
		return s
	}
	ollama := func(path string, opts map[string]any) (string, map[string]any) {
		opts["num_predict"] = 2
		if path == "/api/chat" {
			return path, map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": opts}
		}
		return path, map[string]any{"model": testModel, "prompt": "Hi", "stream": false, "options": opts}
	}
	oai := func(path string, body map[string]any) (string, map[string]any) {
		body["model"], body["max_tokens"] = testModel, 2
		if path == "/v1/chat/completions" {
			body["messages"] = msgs
		} else {
			body["prompt"] = "Hi"
		}
		return path, body
	}
	native := func(body map[string]any) (string, map[string]any) {
		body["prompt"], body["num_predict"] = "Hi", 2
		return "/v1/generate", body
	}
	type req struct {
		path string
		body map[string]any
	}
	r := func(p string, b map[string]any) req { return req{p, b} }
	for _, c := range []struct {
		name string
		req  req
		want int
		msg  string // the whole error message; "" for 200
	}{
		{"ollama chat num_ctx", r(ollama("/api/chat", map[string]any{"num_ctx": -1})), 400, "options.num_ctx: -1 < 0 (0: the loaded n_ctx)"},
		{"native num_ctx", r(native(map[string]any{"num_ctx": -1})), 400, "num_ctx: -1 < 0 (0: the loaded n_ctx)"},
		{"openai num_ctx", r(oai("/v1/chat/completions", map[string]any{"num_ctx": -1})), 400, "num_ctx: -1 < 0 (0: the loaded n_ctx)"},
		{"ollama top_k", r(ollama("/api/generate", map[string]any{"top_k": -7})), 400, "options.top_k: -7 < 0 (0: off)"},
		{"native top_k", r(native(map[string]any{"sampling": map[string]any{"top_k": -7}})), 400, "sampling.top_k: -7 < 0 (0: off)"},
		{"openai top_k", r(oai("/v1/completions", map[string]any{"top_k": -7})), 400, "top_k: -7 < 0 (0: off)"},
		{"ollama 10000 stops", r(ollama("/api/generate", map[string]any{"stop": stops(10000, 1)})), 400, "options.stop: at most 16 stop sequences, got 10000"},
		{"ollama chat 17 stops", r(ollama("/api/chat", map[string]any{"stop": stops(17, 2)})), 400, "options.stop: at most 16 stop sequences, got 17"},
		{"openai 17 stops", r(oai("/v1/chat/completions", map[string]any{"stop": stops(17, 2)})), 400, "stop: at most 16 stop sequences, got 17"},
		{"native 17 stops", r(native(map[string]any{"stop": stops(17, 2)})), 400, "stop: at most 16 stop sequences, got 17"},
		{"ollama long stop", r(ollama("/api/generate", map[string]any{"stop": []string{"a", strings.Repeat("x", 257)}})), 400, "options.stop[1]: 257 bytes, at most 256"},
		{"openai long stop", r(oai("/v1/completions", map[string]any{"stop": strings.Repeat("x", 257)})), 400, "stop[0]: 257 bytes, at most 256"},
		{"native temperature", r(native(map[string]any{"sampling": map[string]any{"temperature": -1}})), 400, "sampling.temperature: -1 not in [0, 100]"},
		{"native top_p", r(native(map[string]any{"sampling": map[string]any{"top_p": 1.5}})), 400, "sampling.top_p: 1.5 not in [0, 1]"},
		{"openai 16 stops", r(oai("/v1/chat/completions", map[string]any{"stop": stops(16, 256)})), 200, ""},
		{"ollama 16 stops", r(ollama("/api/chat", map[string]any{"stop": stops(16, 256), "top_k": 0, "num_ctx": 0})), 200, ""},
		{"native 16 stops", r(native(map[string]any{"stop": stops(16, 256)})), 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out map[string]any
			code := do(t, "POST", e.url()+c.req.path, c.req.body, &out)
			if code != c.want || errMessage(out) != c.msg {
				t.Fatalf("%d %q, want %d %q", code, errMessage(out), c.want, c.msg)
			}
			if c.want == 400 && !strings.HasPrefix(c.req.path, "/api/") {
				field, _, _ := strings.Cut(c.msg, ":")
				if p, _ := out["error"].(map[string]any)["param"].(string); p != field {
					t.Fatalf("param %q, want %q", p, field)
				}
			}
		})
	}
}

// A served path asked with a method it does not take is a 405 listing the
// methods it does take in Allow; a path not served is a 404 without one.
func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	for _, c := range []struct {
		method, path string
		want         int
		allow        string
	}{
		{"GET", "/api/chat", 405, "POST"},
		{"DELETE", "/api/generate", 405, "POST"},
		{"POST", "/api/tags", 405, "GET, HEAD"},
		{"PUT", "/v1/cubes", 405, "GET, HEAD, POST"},
		{"POST", "/v1/cubes/a/memories/m1", 405, "GET, HEAD, PUT, PATCH, DELETE"},
		{"DELETE", "/v1/chat/completions", 405, "POST"},
		{"POST", "/metrics", 405, "GET, HEAD"},
		{"POST", "/", 405, "GET, HEAD"},
		{"GET", "/nope", 404, ""},
		{"POST", "/api/nope", 404, ""},
	} {
		req, _ := http.NewRequest(c.method, e.url()+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		wantMsg := "server: no such endpoint: " + c.method + " " + c.path
		if c.want == 405 {
			wantMsg = "server: method not allowed: " + c.method + " " + c.path + " (allowed: " + c.allow + ")"
		}
		if resp.StatusCode != c.want || resp.Header.Get("Allow") != c.allow || errMessage(out) != wantMsg {
			t.Errorf("%s %s: %d Allow %q %q, want %d %q %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), errMessage(out), c.want, c.allow, wantMsg)
		}
	}
}

// A cube named by both the X-Memosrt-Cube header and the request (Ollama's
// options.cube, the OpenAI and native body's cube) must be the same one:
// with an access key another cube is a 403, as README says of any route
// naming another cube; without one the conflict is a 400 naming the field.
// load_duration is in every Ollama answer (chat, generate, embed), also
// when the model was loaded.
func TestCubeConflictAndLoadDuration(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 512, opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"a", "b"} {
		if code := do(t, "POST", e.url()+"/v1/cubes", map[string]string{"name": c}, nil, admin...); code != 201 {
			t.Fatalf("cube %s: %d", c, code)
		}
	}
	var k struct{ ID, Token string }
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": "a"}, &k, admin...); code != 201 {
		t.Fatalf("key: %d", code)
	}
	key := []string{"Authorization", "Bearer " + k.Token}
	denied := `accesskey: access denied: key ` + k.ID + ` has no read right on cube "b" (no right there)`
	msgs := []map[string]any{{"role": "user", "content": "Hi"}}
	ollamaChat := func(cube string) map[string]any {
		return map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 2, "cube": cube}}
	}
	for _, c := range []struct {
		name, path string
		body       map[string]any
		auth       []string
		want       int
		msg        string
	}{
		{"key ollama", "/api/chat", ollamaChat("b"), key, 403, denied},
		{"key openai", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "cube": "b"}, key, 403, denied},
		{"key native", "/v1/generate", map[string]any{"prompt": "Hi", "num_predict": 2, "cube": "b"}, key, 403, denied},
		{"admin ollama", "/api/chat", ollamaChat("b"), admin, 400, `options.cube: "b", but the X-Memosrt-Cube header names "a" (give one, or the same cube in both)`},
		{"admin openai", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "metadata": map[string]any{"cube": "b"}}, admin, 400, `cube: "b", but the X-Memosrt-Cube header names "a" (give one, or the same cube in both)`},
		{"key same", "/api/chat", ollamaChat("a"), key, 200, ""},
		{"admin same", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2, "cube": "a"}, admin, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out map[string]any
			code := do(t, "POST", e.url()+c.path, c.body, &out, append([]string{CubeHeader, "a"}, c.auth...)...)
			if code != c.want || errMessage(out) != c.msg {
				t.Fatalf("%d %q, want %d %q", code, errMessage(out), c.want, c.msg)
			}
		})
	}
	// the model is loaded by now: load_duration is still reported
	for _, path := range []string{"/api/chat", "/api/generate"} {
		body := ollamaChat("")
		if path == "/api/generate" {
			body = map[string]any{"model": testModel, "prompt": "Hi", "stream": false, "options": map[string]any{"num_predict": 2}}
		}
		var out map[string]any
		if code := do(t, "POST", e.url()+path, body, &out, admin...); code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		if d, ok := out["load_duration"].(float64); !ok || d <= 0 {
			t.Fatalf("%s: load_duration %v in %v", path, out["load_duration"], out)
		}
		ls := stream(t, context.Background(), e.url()+path, map[string]any{"model": testModel, "prompt": "Hi", "messages": msgs,
			"options": map[string]any{"num_predict": 2}}, admin...)
		var last map[string]any
		for m, ok := ls.next(); ok; m, ok = ls.next() {
			last = m
		}
		ls.close()
		if d, ok := last["load_duration"].(float64); !ok || d <= 0 || last["done"] != true {
			t.Fatalf("%s streamed: last line %v", path, last)
		}
	}
	// /api/embed reports it too, as Ollama's EmbedResponse does
	var out map[string]any
	if code := do(t, "POST", e.url()+"/api/embed", map[string]any{"model": testModel, "input": []string{"Hi", "Lily"}}, &out, admin...); code != 200 {
		t.Fatalf("/api/embed: %d", code)
	}
	if d, ok := out["load_duration"].(float64); !ok || d <= 0 || len(out["embeddings"].([]any)) != 2 {
		t.Fatalf("/api/embed: load_duration %v, embeddings %d", out["load_duration"], len(out["embeddings"].([]any)))
	}
}
