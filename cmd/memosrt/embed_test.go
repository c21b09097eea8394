package main

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/bench/gguf"
	"github.com/memosrt/memosrt/embed/llamaembed"
	"github.com/memosrt/memosrt/internal/testmodels"
)

// serve --embed-model with a random-weight BERT (bert-tiny, bge's
// tokenizer, mean pooling): every memory added gets a vector, search fuses
// them with BM25 and ranks otherwise than BM25 alone (the construction is
// llamaembed's TestFusedRanking), and /v1/embeddings and /api/embed answer
// with the model's vectors, those the model gives in this process. Served
// with the same file under an Ollama name (OLLAMA_MODELS), the vectors
// still count; served without it, the data directory searches by BM25
// alone.
func TestServeEmbedModel(t *testing.T) {
	bert := filepath.Join(t.TempDir(), "bert-tiny.gguf")
	if err := gguf.Write(t.Context(), bert, gguf.Presets["bert-tiny"], testmodels.Path(t, "ggml-vocab-bert-bge.gguf"), 1); err != nil {
		t.Fatal(err)
	}
	const query = "the dog of the house"
	texts := []string{"house dog house dog", query, "the cat of the mouse", "the cow of a mouse", "Bob drinks green tea"}
	type cubeView struct{ Memories, Vectors int }
	type hits struct {
		Hits []struct{ Memory struct{ Text string } }
	}
	search := func(p *serveProc) []string {
		var h hits
		if code := p.call(t, "POST", "/v1/cubes/c/search", map[string]any{"query": query, "k": 10}, &h); code != http.StatusOK {
			t.Fatalf("search: %d", code)
		}
		var out []string
		for _, x := range h.Hits {
			out = append(out, x.Memory.Text)
		}
		return out
	}

	db := t.TempDir()
	p := startServe(t, db, nil, "--embed-model", bert)
	if !strings.Contains(p.stderr.String(), ", embeddings llama:random-bert-tiny@") {
		t.Errorf("ready line does not name the embedding model:\n%s", p.stderr.String())
	}
	for _, text := range texts {
		if code := p.call(t, "POST", "/v1/cubes/c/memories", map[string]string{"text": text}, nil); code != http.StatusCreated {
			t.Fatalf("add %q: %d", text, code)
		}
	}
	var cv cubeView
	if code := p.call(t, "GET", "/v1/cubes/c", nil, &cv); code != http.StatusOK || cv.Memories != 5 || cv.Vectors != 5 {
		t.Fatalf("cube: %d %+v, want 5 memories with 5 vectors", code, cv)
	}
	if got := search(p); len(got) != 5 || got[0] != query || got[1] != "house dog house dog" {
		t.Errorf("fused search: %q, want the query's twin first, the BM25 leader second, 5 hits", got)
	}

	l, err := llamaembed.Open(context.Background(), bert, llamaembed.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want, err := l.Embed(context.Background(), []string{"a dog", "a cat"})
	if err != nil {
		t.Fatal(err)
	}
	var oai struct {
		Data []struct{ Embedding []float32 }
	}
	if code := p.call(t, "POST", "/v1/embeddings", map[string]any{"model": "any", "input": []string{"a dog", "a cat"}}, &oai); code != http.StatusOK || len(oai.Data) != 2 {
		t.Fatalf("/v1/embeddings: %d, %d vectors", code, len(oai.Data))
	}
	var oll struct{ Embeddings [][]float32 }
	if code := p.call(t, "POST", "/api/embed", map[string]any{"model": "any", "input": []string{"a dog", "a cat"}}, &oll); code != http.StatusOK {
		t.Fatalf("/api/embed: %d", code)
	}
	for i := range want {
		if len(oai.Data[i].Embedding) != 64 || !slices.Equal(oai.Data[i].Embedding, want[i]) || !slices.Equal(oll.Embeddings[i], want[i]) {
			t.Errorf("input %d: /v1/embeddings %d dims, /api/embed %d dims, not the model's vector", i, len(oai.Data[i].Embedding), len(oll.Embeddings[i]))
		}
	}
	p.stop(t)

	p = startServe(t, db, []string{"OLLAMA_MODELS=" + ollamaStoreWith(t, bert, "bert-tiny")}, "--embed-model", "bert-tiny")
	if code := p.call(t, "GET", "/v1/cubes/c", nil, &cv); code != http.StatusOK || cv.Memories != 5 || cv.Vectors != 5 {
		t.Fatalf("cube with --embed-model bert-tiny from the Ollama store: %d %+v, want 5 memories with 5 vectors", code, cv)
	}
	if got := search(p); len(got) != 5 || got[0] != query {
		t.Errorf("fused search: %q", got)
	}
	p.stop(t)

	p = startServe(t, db, nil)
	if code := p.call(t, "GET", "/v1/cubes/c", nil, &cv); code != http.StatusOK || cv.Memories != 5 || cv.Vectors != 0 {
		t.Fatalf("cube without --embed-model: %d %+v, want 5 memories, 0 vectors", code, cv)
	}
	if got, want := search(p), []string{"house dog house dog", query}; !slices.Equal(got, want) {
		t.Errorf("BM25 search: %q, want %q", got, want)
	}
}
