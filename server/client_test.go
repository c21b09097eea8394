package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/types/model"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"
)

// petSchema is the structured-output schema of the client suites; on
// stories260K only the grammar can make the output follow it.
const petSchema = `{"type":"object","properties":{"name":{"enum":["Lily","Tom"]},"happy":{"type":"boolean"}},"required":["name","happy"]}`

// checkPet fails unless text is one finished petSchema document.
func checkPet(t *testing.T, text, doneReason string) {
	t.Helper()
	var doc struct {
		Name  string `json:"name"`
		Happy *bool  `json:"happy"`
	}
	d := json.NewDecoder(strings.NewReader(text))
	d.DisallowUnknownFields()
	if err := d.Decode(&doc); err != nil || doneReason != "stop" || doc.Name != "Lily" && doc.Name != "Tom" || doc.Happy == nil {
		t.Fatalf("structured output %q (done %q): %v", text, doneReason, err)
	}
}

func greedyOpts(n int) map[string]any {
	return map[string]any{"temperature": 0, "num_predict": n, "seed": 1}
}

// ollamaSuite drives base with the official Ollama client. cube holds
// lilyMemories.
func ollamaSuite(t *testing.T, base, cube string) {
	c := ollamaClient(t, base)
	ctx := context.Background()
	t.Run("version", func(t *testing.T) {
		v, err := c.Version(ctx)
		if err != nil || v == "" {
			t.Fatalf("version %q, %v", v, err)
		}
	})
	t.Run("list", func(t *testing.T) {
		l, err := c.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Models) != 1 || l.Models[0].Name != testModel+":latest" {
			t.Fatalf("models %+v", l.Models)
		}
	})
	t.Run("show", func(t *testing.T) {
		s, err := c.Show(ctx, &api.ShowRequest{Model: testModel})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Capabilities) == 0 || s.Capabilities[0] != "completion" {
			t.Fatalf("capabilities %v", s.Capabilities)
		}
		// the rule of the v0.17.4 CLI (cmd/cmd.go): a model listing
		// "embedding" is run as an embedder, so `ollama run` would print
		// a vector instead of generating
		if slices.Contains(s.Capabilities, model.CapabilityEmbedding) {
			t.Fatalf("a generative model lists %v: `ollama run` would embed", s.Capabilities)
		}
		_, err = c.Show(ctx, &api.ShowRequest{Model: "no-such-model"})
		var se api.StatusError
		if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound {
			t.Fatalf("unknown model: %v", err)
		}
	})
	t.Run("ps", func(t *testing.T) {
		p, err := c.ListRunning(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Models) != 1 || p.Models[0].Name != testModel+":latest" {
			t.Fatalf("ps %+v", p.Models)
		}
	})
	msgs := []api.Message{{Role: "user", Content: "Once upon a time"}}
	var whole string
	t.Run("chat", func(t *testing.T) {
		f := false
		var got []api.ChatResponse
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: msgs, Stream: &f, Options: greedyOpts(16)},
			func(r api.ChatResponse) error { got = append(got, r); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got[0].Done || got[0].Message.Content == "" || got[0].EvalCount < 1 || got[0].EvalCount > 16 {
			t.Fatalf("non-streamed: %+v", got)
		}
		whole = got[0].Message.Content
		var parts []string
		var last api.ChatResponse
		err = c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: msgs, Options: greedyOpts(16)},
			func(r api.ChatResponse) error { parts = append(parts, r.Message.Content); last = r; return nil })
		if err != nil {
			t.Fatal(err)
		}
		// chunks that queue while one is written are coalesced: at least one
		// content chunk and the final one
		if len(parts) < 2 || !last.Done || last.EvalCount != got[0].EvalCount {
			t.Fatalf("streamed %d parts, last %+v", len(parts), last)
		}
		if s := strings.Join(parts, ""); s != whole {
			t.Fatalf("streamed %q, non-streamed %q", s, whole)
		}
	})
	t.Run("generate", func(t *testing.T) {
		var out strings.Builder
		var last api.GenerateResponse
		err := c.Generate(ctx, &api.GenerateRequest{Model: testModel, Prompt: "Once upon a time", Raw: true, Options: greedyOpts(8)},
			func(r api.GenerateResponse) error { out.WriteString(r.Response); last = r; return nil })
		if err != nil {
			t.Fatal(err)
		}
		if out.Len() == 0 || !last.Done || last.EvalCount < 1 || last.EvalCount > 8 {
			t.Fatalf("generate %q %+v", out.String(), last)
		}
	})
	t.Run("structured output", func(t *testing.T) {
		f := false
		var got api.ChatResponse
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: msgs, Stream: &f, Format: json.RawMessage(petSchema), Options: greedyOpts(128)},
			func(r api.ChatResponse) error { got = r; return nil })
		if err != nil {
			t.Fatal(err)
		}
		checkPet(t, got.Message.Content, got.DoneReason)
		var out strings.Builder
		err = c.Generate(ctx, &api.GenerateRequest{Model: testModel, Prompt: "Once upon a time", Raw: true, Format: json.RawMessage(`"json"`), Options: greedyOpts(8)},
			func(r api.GenerateResponse) error { out.WriteString(r.Response); return nil })
		if err != nil || !strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
			t.Fatalf("format json: %q, %v", out.String(), err)
		}
		err = c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: msgs, Stream: &f, Format: json.RawMessage(`{"type":"string","pattern":"^a"}`)},
			func(api.ChatResponse) error { return nil })
		var se api.StatusError
		if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest || !strings.Contains(se.ErrorMessage, "format") || !strings.Contains(se.ErrorMessage, "pattern") {
			t.Fatalf("unsupported schema: %v", err)
		}
	})
	t.Run("embed", func(t *testing.T) {
		r, err := c.Embed(ctx, &api.EmbedRequest{Model: testModel, Input: []string{"a dog", "a cat"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Embeddings) != 2 || len(r.Embeddings[0]) != 64 {
			t.Fatalf("embeddings %d × %d", len(r.Embeddings), len(r.Embeddings[0]))
		}
	})
	t.Run("memories reach the prompt", func(t *testing.T) {
		var with, without api.ChatResponse
		req := &api.ChatRequest{Model: testModel, Messages: msgs, DebugRenderOnly: true, Options: map[string]any{"cube": cube}}
		if err := c.Chat(ctx, req, func(r api.ChatResponse) error { with = r; return nil }); err != nil {
			t.Fatal(err)
		}
		req.Options = nil
		if err := c.Chat(ctx, req, func(r api.ChatResponse) error { without = r; return nil }); err != nil {
			t.Fatal(err)
		}
		if with.DebugInfo == nil || without.DebugInfo == nil {
			t.Fatal("no rendered template")
		}
		for _, m := range lilyMemories {
			if !strings.Contains(with.DebugInfo.RenderedTemplate, m) {
				t.Errorf("memory %q not in the prompt %q", m, with.DebugInfo.RenderedTemplate)
			}
			if strings.Contains(without.DebugInfo.RenderedTemplate, m) {
				t.Errorf("memory %q in a prompt without cube", m)
			}
		}
		if with.PromptEvalCount <= without.PromptEvalCount {
			t.Errorf("prompt with cube %d tokens, without %d", with.PromptEvalCount, without.PromptEvalCount)
		}
	})
	t.Run("unknown cube", func(t *testing.T) {
		f := false
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Messages: msgs, Stream: &f, Options: map[string]any{"cube": "no-such-cube"}},
			func(api.ChatResponse) error { return nil })
		var se api.StatusError
		if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound {
			t.Fatalf("got %v", err)
		}
	})
}

// openaiSuite drives base with the official OpenAI client. wantCached
// checks that a conversation's second turn reuses the first's KV.
func openaiSuite(t *testing.T, base, cube string, wantCached bool) {
	c := openaiClient(base)
	ctx := context.Background()
	t.Run("models", func(t *testing.T) {
		p, err := c.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Data) != 1 || p.Data[0].ID != testModel {
			t.Fatalf("models %+v", p.Data)
		}
	})
	params := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(16), Temperature: openai.Float(0), Seed: openai.Int(1),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Once upon a time")}}
	var whole string
	t.Run("chat", func(t *testing.T) {
		r, err := c.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) != 1 || r.Choices[0].Message.Content == "" || r.Usage.PromptTokens < 1 || r.Usage.CompletionTokens < 1 || r.Usage.CompletionTokens > 16 {
			t.Fatalf("response %+v", r)
		}
		whole = r.Choices[0].Message.Content
	})
	t.Run("chat stream", func(t *testing.T) {
		p := params
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		s := c.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		n := 0
		for s.Next() {
			acc.AddChunk(s.Current())
			n++
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if n < 2 || len(acc.Choices) != 1 {
			t.Fatalf("%d chunks, %+v", n, acc.ChatCompletion)
		}
		if got := acc.Choices[0].Message.Content; got != whole {
			t.Fatalf("streamed %q, non-streamed %q", got, whole)
		}
		if acc.Usage.CompletionTokens < 1 || acc.Usage.PromptTokens < 1 {
			t.Fatalf("usage %+v", acc.Usage)
		}
	})
	t.Run("structured output", func(t *testing.T) {
		var schema map[string]any
		if err := json.Unmarshal([]byte(petSchema), &schema); err != nil {
			t.Fatal(err)
		}
		p := params
		p.MaxTokens = openai.Int(128)
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "pet", Schema: schema, Strict: openai.Bool(true)}}}
		r, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		checkPet(t, r.Choices[0].Message.Content, string(r.Choices[0].FinishReason))
		p.MaxTokens = openai.Int(8)
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
		if r, err = c.Chat.Completions.New(ctx, p); err != nil || !strings.HasPrefix(strings.TrimSpace(r.Choices[0].Message.Content), "{") {
			t.Fatalf("json_object: %+v, %v", r, err)
		}
	})
	t.Run("completion", func(t *testing.T) {
		r, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(testModel),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")}, MaxTokens: openai.Int(8), Temperature: openai.Float(0)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) != 1 || r.Choices[0].Text == "" {
			t.Fatalf("completion %+v", r)
		}
	})
	t.Run("embeddings", func(t *testing.T) {
		r, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: testModel,
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a dog", "a cat", "a bird"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Data) != 3 || len(r.Data[2].Embedding) != 64 || r.Data[2].Index != 2 {
			t.Fatalf("embeddings %d", len(r.Data))
		}
	})
	t.Run("second turn cached", func(t *testing.T) {
		cc := openaiClient(base, option.WithHeader(CubeHeader, cube))
		turn1 := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Lily went to the park")}
		p := params
		p.Messages = turn1
		r1, err := cc.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		p.Messages = append(turn1, openai.AssistantMessage(r1.Choices[0].Message.Content), openai.UserMessage("Then the dog"))
		r2, err := cc.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("turn 1: %d prompt tokens, %d cached; turn 2: %d prompt tokens, %d cached", r1.Usage.PromptTokens,
			r1.Usage.PromptTokensDetails.CachedTokens, r2.Usage.PromptTokens, r2.Usage.PromptTokensDetails.CachedTokens)
		if r2.Choices[0].Message.Content == "" {
			t.Fatal("empty second turn")
		}
		if wantCached && r2.Usage.PromptTokensDetails.CachedTokens < r1.Usage.PromptTokens-1 {
			t.Fatalf("second turn cached %d tokens, first turn's prompt was %d", r2.Usage.PromptTokensDetails.CachedTokens, r1.Usage.PromptTokens)
		}
	})
}

func TestClients(t *testing.T) {
	e := newEnv(t, envConfig{})
	addCube(t, e, "lily", lilyMemories...)
	t.Run("ollama", func(t *testing.T) { ollamaSuite(t, e.url(), "lily") })
	t.Run("openai", func(t *testing.T) { openaiSuite(t, e.url(), "lily", true) })

	// The fallback backend: a text-only memosrt whose upstream is the
	// memosrt above, through its Ollama endpoint; same clients, same tests.
	t.Run("fallback", func(t *testing.T) {
		f := newEnv(t, envConfig{noEngine: true, mo: memosrt.Options{Upstream: &memosrt.UpstreamOptions{URL: e.url(), Model: testModel}}})
		addCube(t, f, "lily", lilyMemories...)
		t.Run("ollama", func(t *testing.T) { ollamaSuite(t, f.url(), "lily") })
		t.Run("openai", func(t *testing.T) { openaiSuite(t, f.url(), "lily", false) })
	})
	// the same through the memosrt above's OpenAI routes
	t.Run("fallback openai", func(t *testing.T) {
		f := openAIUpstream(t, e.url(), testModel, "", false)
		addCube(t, f, "lily", lilyMemories...)
		t.Run("openai", func(t *testing.T) { openaiSuite(t, f.url(), "lily", false) })
	})
}

// The fallback backend records a turn's memory uses where the llama path
// records them: after a complete answer, never for a failed one.
func TestUpstreamRecordsUseAfterAnswer(t *testing.T) {
	e := newEnv(t, envConfig{})
	mo := memosrt.Options{Upstream: &memosrt.UpstreamOptions{URL: e.url(), Model: testModel}}
	mo.Tiers.Heat.RawCounts = true // counts without decay: exact between calls
	f := newEnv(t, envConfig{noEngine: true, mo: mo})
	addCube(t, f, "lily", lilyMemories...)
	ctx := context.Background()
	visits := func() float64 {
		t.Helper()
		st, err := f.os.Tiers(ctx, "lily", 0)
		if err != nil {
			t.Fatal(err)
		}
		v := 0.0
		for _, m := range st.Memories {
			v += m.Usage.Visits
		}
		return v
	}
	req := memosrt.Request{Cube: "lily", NumPredict: 4, Messages: []memosrt.Message{{Role: "user", Content: "Where does Max run?"}}}
	if v := visits(); v != 0 {
		t.Fatalf("%v visits before any request", v)
	}
	if _, err := f.os.Chat(ctx, req); err != nil {
		t.Fatal(err)
	}
	v1 := visits()
	if v1 <= 0 {
		t.Fatalf("%v visits after an answered turn", v1)
	}
	e.ts.Close() // the upstream is gone
	if _, err := f.os.Chat(ctx, req); !errors.Is(err, memosrt.ErrUpstream) {
		t.Fatalf("chat with the upstream gone: %v, want ErrUpstream", err)
	}
	if v2 := visits(); v2 != v1 {
		t.Fatalf("a failed turn changed the visits: %v → %v", v1, v2)
	}
}
