package server

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/lora"
)

// Requests get their cube's default adapters or the ones they name; KV
// state is reused only under the same adapter set.
func TestAdapters(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "happy.gguf")
	if err := lora.WriteRandom(ctx, path, testmodels.Stories(t), lora.RandomSpec{Rank: 4, Std: 0.5, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	addCube(t, e, "lily", lilyMemories...)
	if _, err := e.reg.Add(ctx, lora.AddRequest{Name: "happy", Cube: "lily", Path: path, Default: true}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage oaiUsage
	}
	ask := func(adapters any) answer {
		t.Helper()
		body := map[string]any{"model": testModel, "max_tokens": 16, "temperature": 0, "cube": "lily",
			"messages": []map[string]string{{"role": "user", "content": "Once upon a time"}}}
		if adapters != nil {
			body["adapters"] = adapters
		}
		var a answer
		var oe oaiError
		if code := do(t, "POST", e.url()+"/v1/chat/completions", body, &a); code != http.StatusOK {
			do(t, "POST", e.url()+"/v1/chat/completions", body, &oe)
			t.Fatalf("adapters %v: %d %s", adapters, code, oe.Error.Message)
		}
		return a
	}
	def := ask(nil)                 // the cube's default: happy
	named := ask([]string{"happy"}) // the same set, named
	none := ask("none")
	if def.Choices[0].Message.Content != named.Choices[0].Message.Content {
		t.Fatalf("default %q, named %q", def.Choices[0].Message.Content, named.Choices[0].Message.Content)
	}
	if def.Choices[0].Message.Content == none.Choices[0].Message.Content {
		t.Fatalf("the adapter changed nothing: %q", none.Choices[0].Message.Content)
	}
	if named.Usage.PromptTokensDetails.CachedTokens < int(named.Usage.PromptTokens)-1 {
		t.Fatalf("same adapters: cached %d of %d", named.Usage.PromptTokensDetails.CachedTokens, named.Usage.PromptTokens)
	}
	if none.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("no adapters after happy: %d tokens cached from state computed with happy", none.Usage.PromptTokensDetails.CachedTokens)
	}
	for _, c := range []struct {
		adapters any
		code     int
		param    string
	}{
		{[]string{"sad"}, http.StatusNotFound, "adapters"},
		{"happy:x", http.StatusBadRequest, "adapters"},
		{[]any{3}, http.StatusBadRequest, "adapters[0]"},
	} {
		body := map[string]any{"model": testModel, "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": "x"}}, "adapters": c.adapters}
		var oe oaiError
		if code := do(t, "POST", e.url()+"/v1/chat/completions", body, &oe); code != c.code || oe.Error.Param == nil || *oe.Error.Param != c.param {
			t.Errorf("adapters %v: %d %v %q", c.adapters, code, oe.Error.Param, oe.Error.Message)
		}
	}
}
