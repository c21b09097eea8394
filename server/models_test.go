package server

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/ollama/ollama/api"
)

const (
	tinyName    = "tiny:latest"
	storiesName = testModel + ":latest" // as the Ollama API lists it
)

// psModels returns /api/ps through the Ollama client: name → expiry.
func psModels(t *testing.T, c *api.Client) map[string]time.Time {
	t.Helper()
	ps, err := c.ListRunning(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, m := range ps.Models {
		out[m.Name] = m.ExpiresAt
	}
	return out
}

func ollamaGenerate(t *testing.T, c *api.Client, req *api.GenerateRequest) api.GenerateResponse {
	t.Helper()
	f := false
	req.Stream = &f
	var out api.GenerateResponse
	if err := c.Generate(context.Background(), req, func(r api.GenerateResponse) error { out = r; return nil }); err != nil {
		t.Fatalf("generate %s: %v", req.Model, err)
	}
	return out
}

// TestSeveralModels serves stories260K (the primary) and a second model
// (llama-2-tiny-random, another fingerprint) in one server, at most one
// loaded at a time: both listed, each loaded on first use with the other
// unloaded, each answering as it does when served alone; keep_alive sets
// expires_at, and 0 unloads (ollama stop).
func TestSeveralModels(t *testing.T) {
	tiny := testmodels.Path(t, "llama-2-tiny-random.gguf")
	e := newEnv(t, envConfig{mo: memosrt.Options{Models: []memosrt.ModelSpec{{Name: tinyName, Path: tiny}}, MaxModels: 1}})
	c := ollamaClient(t, e.url())
	ctx := context.Background()

	list, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	if len(list.Models) != 2 || list.Models[0].Name != storiesName || list.Models[1].Name != tinyName {
		t.Fatalf("/api/tags lists %+v, want %s and %s", list.Models, storiesName, tinyName)
	}
	for _, m := range list.Models {
		if !hex.MatchString(m.Digest) || m.Size == 0 {
			t.Fatalf("%s: digest %q size %d (the ollama CLI prints digest[:12])", m.Name, m.Digest, m.Size)
		}
	}
	if list.Models[0].Digest == list.Models[1].Digest {
		t.Fatal("two models with one digest")
	}
	ps := psModels(t, c)
	if len(ps) != 1 || ps[storiesName].Year() < 2300 {
		t.Fatalf("/api/ps = %v, want only %s, loaded forever (no keep-alive set)", ps, storiesName)
	}

	prompt := "Once upon a time"
	greedy := map[string]any{"temperature": 0, "num_predict": 12}
	first := ollamaGenerate(t, c, &api.GenerateRequest{Model: testModel, Prompt: prompt, Options: greedy})
	// "tiny" without its tag names tiny:latest; loading it unloads the idle primary
	tinyOut := ollamaGenerate(t, c, &api.GenerateRequest{Model: "tiny", Prompt: prompt, Options: greedy})
	if tinyOut.Model != tinyName || tinyOut.Response == "" {
		t.Fatalf("tiny answered as %q: %q", tinyOut.Model, tinyOut.Response)
	}
	if ps := psModels(t, c); len(ps) != 1 || ps[tinyName].IsZero() {
		t.Fatalf("/api/ps = %v, want only %s (max 1 loaded)", ps, tinyName)
	}
	// the same model served alone answers the same
	alone := newEnv(t, envConfig{model: tiny, mo: memosrt.Options{ModelName: tinyName}})
	want := ollamaGenerate(t, ollamaClient(t, alone.url()), &api.GenerateRequest{Model: tinyName, Prompt: prompt, Options: greedy})
	alone.close(t)
	if tinyOut.Response != want.Response {
		t.Fatalf("tiny in a shared server:\n got %q\nwant %q (served alone)", tinyOut.Response, want.Response)
	}
	// back to the primary: reloaded, same greedy answer
	again := ollamaGenerate(t, c, &api.GenerateRequest{Model: testModel, Prompt: prompt, Options: greedy})
	if again.Response != first.Response || again.Model != storiesName {
		t.Fatalf("after a reload: %q from %q, want %q", again.Response, again.Model, first.Response)
	}
	if again.LoadDuration <= 0 {
		t.Fatalf("load_duration %v after a reload", again.LoadDuration)
	}

	// keep_alive sets expires_at from the end of the request
	before := time.Now()
	ollamaGenerate(t, c, &api.GenerateRequest{Model: testModel, Prompt: prompt, Options: greedy, KeepAlive: &api.Duration{Duration: 10 * time.Minute}})
	exp := psModels(t, c)[storiesName]
	if exp.Before(before.Add(10*time.Minute)) || exp.After(time.Now().Add(10*time.Minute)) {
		t.Fatalf("expires_at %v, want 10m after the request (%v .. %v)", exp, before, time.Now())
	}

	// a chat with keep_alive 0 unloads after its turn, its conversation saved
	addCube(t, e, "lily", "Lily has a red ball.")
	chat := func(keep *api.Duration) api.ChatResponse {
		t.Helper()
		f := false
		var out api.ChatResponse
		err := c.Chat(ctx, &api.ChatRequest{Model: testModel, Stream: &f, KeepAlive: keep, Options: map[string]any{"temperature": 0, "num_predict": 8, "cube": "lily"},
			Messages: []api.Message{{Role: "user", Content: "What does Lily have?"}}}, func(r api.ChatResponse) error { out = r; return nil })
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	turn := chat(&api.Duration{Duration: 0})
	if ps := psModels(t, c); len(ps) != 0 {
		t.Fatalf("/api/ps = %v after keep_alive 0, want none", ps)
	}
	var conv []kvcache.Info
	for _, p := range e.kv.List("") {
		if p.Label == "conv:lily" {
			conv = append(conv, p)
		}
	}
	if len(conv) != 1 {
		t.Fatalf("%d conversation packs of lily after the unload, want 1", len(conv))
	}
	// the next turn loads the model and restores the saved state
	turn2 := chat(nil)
	if turn2.Message.Content != turn.Message.Content || turn2.PromptEvalCount != turn.PromptEvalCount {
		t.Fatalf("after reload: %q (%d prompt tokens), want %q (%d)", turn2.Message.Content, turn2.PromptEvalCount, turn.Message.Content, turn.PromptEvalCount)
	}

	// ollama stop: an empty generate with keep_alive 0 answers "unload"
	stop := ollamaGenerate(t, c, &api.GenerateRequest{Model: testModel, KeepAlive: &api.Duration{Duration: 0}})
	if stop.DoneReason != "unload" || !stop.Done {
		t.Fatalf("empty generate with keep_alive 0: %+v", stop)
	}
	if ps := psModels(t, c); len(ps) != 0 {
		t.Fatalf("/api/ps = %v after ollama stop", ps)
	}
	// an empty generate loads (ollama run MODEL does this first)
	load := ollamaGenerate(t, c, &api.GenerateRequest{Model: tinyName, KeepAlive: &api.Duration{Duration: time.Second}})
	if load.DoneReason != "load" {
		t.Fatalf("empty generate: %+v", load)
	}
	// keep_alive 1s: unloaded by its timer (waits, asserts no time)
	deadline := time.Now().Add(time.Minute)
	for len(psModels(t, c)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("/api/ps = %v a minute after keep_alive 1s", psModels(t, c))
		}
		time.Sleep(50 * time.Millisecond)
	}

	// an unknown model is a 404 naming what is served
	err = c.Generate(ctx, &api.GenerateRequest{Model: "nosuch", Prompt: "x"}, func(api.GenerateResponse) error { return nil })
	var se api.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusNotFound || !strings.Contains(se.ErrorMessage, tinyName) {
		t.Fatalf("unknown model: %v", err)
	}
	// OpenAI's list has both
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if code := do(t, "GET", e.url()+"/v1/models", nil, &models); code != 200 || len(models.Data) != 2 || models.Data[1].ID != tinyName {
		t.Fatalf("/v1/models: %d %+v", code, models)
	}
}

// TestEmbedModels: with the models embedding (no --embed embedder), an
// embedding request names the model as a generation does: an unknown name
// is a 404 on /api/embed, /api/embeddings and /v1/embeddings; the second
// model embeds with its own width; keep_alive 0 unloads it afterwards.
func TestEmbedModels(t *testing.T) {
	tiny := testmodels.Path(t, "llama-2-tiny-random.gguf")
	e := newEnv(t, envConfig{noEmbed: true, mo: memosrt.Options{Models: []memosrt.ModelSpec{{Name: tinyName, Path: tiny}}}})
	c := ollamaClient(t, e.url())
	ctx := context.Background()
	for _, p := range []struct{ path, body string }{
		{"/api/embed", `{"model":"nope","input":"x"}`},
		{"/api/embeddings", `{"model":"nope","prompt":"x"}`},
		{"/v1/embeddings", `{"model":"nope","input":"x"}`},
	} {
		resp, err := http.Post(e.url()+p.path, "application/json", strings.NewReader(p.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s with an unknown model: %d, want 404", p.path, resp.StatusCode)
		}
	}
	prim, err := c.Embed(ctx, &api.EmbedRequest{Model: testModel, Input: "Lily"})
	if err != nil {
		t.Fatal(err)
	}
	zero := api.Duration{Duration: 0}
	other, err := c.Embed(ctx, &api.EmbedRequest{Model: "tiny", Input: "Lily", KeepAlive: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if other.Model != tinyName || prim.Model != storiesName {
		t.Fatalf("models answered %q and %q", prim.Model, other.Model)
	}
	// each model's own embedding width (n_embd)
	if len(prim.Embeddings[0]) == len(other.Embeddings[0]) {
		t.Fatalf("both models embed with %d dimensions", len(prim.Embeddings[0]))
	}
	if ps := psModels(t, c); len(ps) != 1 || ps[storiesName].IsZero() {
		t.Fatalf("/api/ps = %v after an embed with keep_alive 0, want only %s", ps, storiesName)
	}
}
