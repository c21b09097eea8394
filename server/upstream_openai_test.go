package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	"github.com/memosrt/memosrt"
)

// exchange is one request that went through a recorder and the answer
// the real server behind it gave, as far as it was read.
type exchange struct {
	path, auth string
	req        []byte
	mu         sync.Mutex // guards resp
	resp       bytes.Buffer
}

func (e *exchange) answer() []byte {
	e.mu.Lock()
	defer e.mu.Unlock()
	return bytes.Clone(e.resp.Bytes())
}

// tee copies what the proxy writes to the client into its exchange first.
type tee struct {
	http.ResponseWriter
	e *exchange
}

func (w tee) Write(b []byte) (int, error) {
	w.e.mu.Lock()
	w.e.resp.Write(b)
	w.e.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w tee) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recorder is a reverse proxy in front of a real server that keeps every
// exchange: what the upstream backend sent and what the server answered.
type recorder struct {
	ts *httptest.Server
	mu sync.Mutex // guards ex
	ex []*exchange
}

func newRecorder(t *testing.T, target string) *recorder {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	r := &recorder{}
	r.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		e := &exchange{path: req.URL.Path, auth: req.Header.Get("Authorization"), req: body}
		r.mu.Lock()
		r.ex = append(r.ex, e)
		r.mu.Unlock()
		rp.ServeHTTP(tee{w, e}, req)
	}))
	t.Cleanup(r.ts.Close)
	return r
}

// last returns the last exchange on path.
func (r *recorder) last(t *testing.T, path string) *exchange {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.ex) - 1; i >= 0; i-- {
		if r.ex[i].path == path {
			return r.ex[i]
		}
	}
	t.Fatalf("no request to %s went upstream", path)
	return nil
}

// upstreamRequest is the part of a chat request the tests read.
type upstreamRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role       string `json:"role"`
		Content    string `json:"content"`
		ToolCallID string `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ToolChoice        any   `json:"tool_choice"`
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
	Tools             []any `json:"tools"`
}

func (e *exchange) request(t *testing.T) upstreamRequest {
	t.Helper()
	var r upstreamRequest
	if err := json.Unmarshal(e.req, &r); err != nil {
		t.Fatalf("upstream request %q: %v", e.req, err)
	}
	return r
}

// upstreamUsage are the counts the upstream reported: of its JSON answer,
// or of the usage chunk of its SSE stream.
type upstreamUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

// reply reads the upstream's answer: content (chat or completion text,
// streamed or not) and usage.
func (e *exchange) reply(t *testing.T) (string, upstreamUsage) {
	t.Helper()
	type body struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *upstreamUsage `json:"usage"`
	}
	b := e.answer()
	var text strings.Builder
	var u *upstreamUsage
	add := func(raw []byte) {
		var m body
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("upstream answer %q: %v", raw, err)
		}
		for _, c := range m.Choices {
			text.WriteString(c.Text + c.Message.Content + c.Delta.Content)
		}
		if m.Usage != nil {
			u = m.Usage
		}
	}
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		add(b)
	} else {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "[DONE]" {
				add([]byte(d))
			}
		}
	}
	if u == nil {
		t.Fatalf("the upstream reported no usage: %q", b)
	}
	return text.String(), *u
}

// openAIUpstream opens a text-only server whose upstream is base through
// its OpenAI routes.
func openAIUpstream(t *testing.T, base, model, key string, noEmbed bool) *env {
	return newEnv(t, envConfig{noEngine: true, noEmbed: noEmbed, mo: memosrt.Options{Upstream: &memosrt.UpstreamOptions{
		API: memosrt.UpstreamOpenAI, URL: base, Model: model, APIKey: key}}})
}

// The openai backend against a second memosrt through its OpenAI routes:
// the cube's memories are in the messages the upstream received, the
// usage reported is the upstream's exactly, streamed and not, and the
// API key reaches it as a bearer token.
func TestOpenAIUpstreamChat(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024, opts: Options{Token: "sekret"}})
	rec := newRecorder(t, e.url())
	f := openAIUpstream(t, rec.ts.URL, testModel, "sekret", false)
	addCube(t, f, "lily", lilyMemories...)
	ctx := context.Background()
	c := openaiClient(f.url(), option.WithHeader(CubeHeader, "lily"))
	params := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(12), Temperature: openai.Float(0),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where does Max run?")}}
	var promptWith int64
	t.Run("non-streamed", func(t *testing.T) {
		r, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		ex := rec.last(t, "/v1/chat/completions")
		if ex.auth != "Bearer sekret" {
			t.Fatalf("Authorization %q", ex.auth)
		}
		req := ex.request(t)
		if req.Model != testModel || req.Stream || len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Role != "user" {
			t.Fatalf("upstream request %s", ex.req)
		}
		// retrieval put the memory about Max running before the question
		if !strings.Contains(req.Messages[1].Content, lilyMemories[1]) || !strings.HasSuffix(req.Messages[1].Content, "Where does Max run?") {
			t.Fatalf("user turn sent upstream %q", req.Messages[1].Content)
		}
		text, u := ex.reply(t)
		if r.Choices[0].Message.Content != text || text == "" {
			t.Fatalf("answer %q, upstream's %q", r.Choices[0].Message.Content, text)
		}
		if r.Usage.PromptTokens != u.PromptTokens || r.Usage.CompletionTokens != u.CompletionTokens || u.PromptTokens == 0 || u.CompletionTokens == 0 {
			t.Fatalf("usage %+v, the upstream's %+v", r.Usage, u)
		}
		promptWith = r.Usage.PromptTokens
	})
	t.Run("streamed", func(t *testing.T) {
		p := params
		p.StreamOptions.IncludeUsage = openai.Bool(true)
		s := c.Chat.Completions.NewStreaming(ctx, p)
		var text strings.Builder
		var usage openai.CompletionUsage
		chunks := 0
		for s.Next() {
			ch := s.Current()
			if len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
				chunks++
			}
			if ch.JSON.Usage.Valid() {
				usage = ch.Usage
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		ex := rec.last(t, "/v1/chat/completions")
		req := ex.request(t)
		if !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage {
			t.Fatalf("upstream request %s", ex.req)
		}
		want, u := ex.reply(t)
		if text.String() != want || chunks < 2 {
			t.Fatalf("streamed %q in %d chunks, the upstream's %q", text.String(), chunks, want)
		}
		if usage.PromptTokens != u.PromptTokens || usage.CompletionTokens != u.CompletionTokens || u.PromptTokens != promptWith {
			t.Fatalf("usage %+v, the upstream's %+v (non-streamed prompt %d)", usage, u, promptWith)
		}
	})
	t.Run("no cube", func(t *testing.T) {
		nc := openaiClient(f.url())
		r, err := nc.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		req := rec.last(t, "/v1/chat/completions").request(t)
		if len(req.Messages) != 1 || req.Messages[0].Content != "Where does Max run?" {
			t.Fatalf("upstream messages %+v", req.Messages)
		}
		if r.Usage.PromptTokens >= promptWith {
			t.Fatalf("prompt without the cube %d tokens, with it %d", r.Usage.PromptTokens, promptWith)
		}
	})
	t.Run("ollama route", func(t *testing.T) {
		var parts []string
		var last api.ChatResponse
		err := ollamaClient(t, f.url()).Chat(ctx, &api.ChatRequest{Model: testModel, Messages: []api.Message{{Role: "user", Content: "Where does Max run?"}},
			Options: map[string]any{"cube": "lily", "temperature": 0, "num_predict": 12}},
			func(r api.ChatResponse) error { parts = append(parts, r.Message.Content); last = r; return nil })
		if err != nil {
			t.Fatal(err)
		}
		want, u := rec.last(t, "/v1/chat/completions").reply(t)
		if strings.Join(parts, "") != want || int64(last.PromptEvalCount) != u.PromptTokens || int64(last.EvalCount) != u.CompletionTokens {
			t.Fatalf("ollama route %q %d+%d, the upstream's %q %+v", strings.Join(parts, ""), last.PromptEvalCount, last.EvalCount, want, u)
		}
	})
	t.Run("completion", func(t *testing.T) {
		nc := openaiClient(f.url())
		r, err := nc.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
		if err != nil {
			t.Fatal(err)
		}
		text, u := rec.last(t, "/v1/completions").reply(t)
		if r.Choices[0].Text != text || r.Usage.PromptTokens != u.PromptTokens || r.Usage.CompletionTokens != u.CompletionTokens || u.CompletionTokens == 0 {
			t.Fatalf("completion %q %+v, the upstream's %q %+v", r.Choices[0].Text, r.Usage, text, u)
		}
	})
}

// Tools pass through both ways: the tools and the choice go upstream, the
// upstream's calls come back (streamed and not), and an earlier turn's
// calls and their results go upstream as tool_calls and tool turns paired
// by id.
func TestOpenAIUpstreamTools(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024})
	rec := newRecorder(t, e.url())
	f := openAIUpstream(t, rec.ts.URL+"/v1", testModel, "", false)
	ctx := context.Background()
	tools := []openai.ChatCompletionToolParam{
		{Function: shared.FunctionDefinitionParam{Name: "get_weather", Description: openai.String("Weather of a city"), Parameters: weatherSchema}},
		{Function: shared.FunctionDefinitionParam{Name: "get_time", Description: openai.String("Time in a zone"), Parameters: timeSchema}},
	}
	params := openai.ChatCompletionNewParams{Model: testModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(toolQuestion)},
		Tools: tools, ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		ParallelToolCalls: openai.Bool(false), Temperature: openai.Float(0), MaxTokens: openai.Int(256)}
	dc, fc := openaiClient(e.url()), openaiClient(f.url())
	direct, err := dc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := direct.Choices[0].Message.ToolCalls
	if len(want) != 1 {
		t.Fatalf("the upstream itself made %d calls", len(want))
	}
	got, err := fc.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	req := rec.last(t, "/v1/chat/completions").request(t)
	if len(req.Tools) != 2 || req.ToolChoice != "required" || req.ParallelToolCalls == nil || *req.ParallelToolCalls {
		t.Fatalf("upstream request: tools %v, choice %v, parallel %v", req.Tools, req.ToolChoice, req.ParallelToolCalls)
	}
	if len(req.Messages) != 1 || strings.Contains(req.Messages[0].Content, "get_weather") {
		t.Fatalf("the tools went as a turn too: %+v", req.Messages)
	}
	ch := got.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != want[0].Function.Name ||
		ch.Message.ToolCalls[0].Function.Arguments != want[0].Function.Arguments {
		t.Fatalf("through the upstream: finish %q calls %+v, the upstream's %+v", ch.FinishReason, ch.Message.ToolCalls, want)
	}
	checkCall(t, want[0].Function.Name, want[0].Function.Arguments)

	s := fc.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if sc := acc.Choices[0].Message.ToolCalls; acc.Choices[0].FinishReason != "tool_calls" || len(sc) != 1 || sc[0].Function.Name != want[0].Function.Name ||
		sc[0].Function.Arguments != want[0].Function.Arguments {
		t.Fatalf("streamed through the upstream: %+v, the upstream's %+v", acc.Choices[0], want)
	}

	// the next turn: the call and its result go back upstream
	call := want[0]
	params.Messages = append(params.Messages, openai.ChatCompletionMessageParamUnion{OfAssistant: &openai.ChatCompletionAssistantMessageParam{
		ToolCalls: []openai.ChatCompletionMessageToolCallParam{{ID: call.ID, Function: openai.ChatCompletionMessageToolCallFunctionParam{
			Name: call.Function.Name, Arguments: call.Function.Arguments}}}}}, openai.ToolMessage("sunny, 21 C", call.ID))
	params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	params.MaxTokens = openai.Int(8)
	if _, err := fc.Chat.Completions.New(ctx, params); err != nil {
		t.Fatal(err)
	}
	req = rec.last(t, "/v1/chat/completions").request(t)
	if len(req.Messages) != 3 || req.ToolChoice != "none" {
		t.Fatalf("upstream request %+v", req)
	}
	a, tm := req.Messages[1], req.Messages[2]
	if a.Role != "assistant" || a.Content != "" || len(a.ToolCalls) != 1 || a.ToolCalls[0].Function.Name != call.Function.Name ||
		a.ToolCalls[0].Function.Arguments != call.Function.Arguments || a.ToolCalls[0].ID == "" {
		t.Fatalf("assistant turn sent upstream %+v", a)
	}
	if tm.Role != "tool" || tm.Content != "sunny, 21 C" || tm.ToolCallID != a.ToolCalls[0].ID {
		t.Fatalf("tool turn sent upstream %+v (call id %q)", tm, a.ToolCalls[0].ID)
	}
}

// The upstream's errors keep their meaning: its 404 for a model it does
// not serve, its 400, its 401 for a missing or wrong key (a 502 here: the
// server's configuration, not the client's), and an upstream that is gone.
func TestOpenAIUpstreamErrors(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 256, opts: Options{Token: "sekret"}})
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	chat := func(f *env, model, content string) (int, oaiError) {
		var body oaiError
		code := do(t, "POST", f.url()+"/v1/chat/completions", map[string]any{"model": model, "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": content}}}, &body)
		return code, body
	}
	for _, c := range []struct {
		name, url, model, key, content string
		code                           int
		msg                            string
	}{
		{"unknown model", e.url(), "nosuch", "sekret", "hi", http.StatusNotFound, `"nosuch" (this server serves stories260K)`},
		{"prompt too long", e.url(), testModel, "sekret", strings.Repeat("Lily runs. ", 200), http.StatusBadRequest, "upstream: "},
		{"wrong key", e.url(), testModel, "wrong", "hi", http.StatusBadGateway, "API key"},
		{"no key", e.url(), testModel, "", "hi", http.StatusBadGateway, "API key"},
		{"upstream gone", gone.URL, testModel, "sekret", "hi", http.StatusBadGateway, "upstream failed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := openAIUpstream(t, c.url, c.model, c.key, false)
			code, body := chat(f, c.model, c.content)
			if code != c.code || !strings.Contains(body.Error.Message, c.msg) {
				t.Fatalf("%d %q, want %d with %q", code, body.Error.Message, c.code, c.msg)
			}
			_, err := f.os.Chat(context.Background(), memosrt.Request{Messages: []memosrt.Message{{Role: "user", Content: c.content}}, NumPredict: 4})
			switch c.code {
			case http.StatusNotFound:
				if !errors.Is(err, memosrt.ErrModelNotFound) {
					t.Fatalf("Chat: %v, want ErrModelNotFound", err)
				}
			case http.StatusBadGateway:
				if !errors.Is(err, memosrt.ErrUpstream) {
					t.Fatalf("Chat: %v, want ErrUpstream", err)
				}
			}
		})
	}
}

// Embeddings go to the upstream's /v1/embeddings with its model: the
// vectors are the upstream's own.
func TestOpenAIUpstreamEmbed(t *testing.T) {
	e := newEnv(t, envConfig{})
	f := openAIUpstream(t, e.url(), testModel, "", true)
	in := map[string]any{"model": testModel, "input": []string{"a dog", "a cat"}}
	var want, got struct {
		Data []struct {
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
	}
	if code := do(t, "POST", e.url()+"/v1/embeddings", in, &want); code != http.StatusOK || len(want.Data) != 2 {
		t.Fatalf("upstream embeddings: %d", code)
	}
	if code := do(t, "POST", f.url()+"/v1/embeddings", in, &got); code != http.StatusOK || len(got.Data) != 2 {
		t.Fatalf("embeddings through the upstream: %d", code)
	}
	for i := range want.Data {
		if len(got.Data[i].Embedding) != 64 || !slices.Equal(got.Data[i].Embedding, want.Data[i].Embedding) {
			t.Fatalf("embedding %d: %v, the upstream's %v", i, got.Data[i].Embedding, want.Data[i].Embedding)
		}
	}
}
