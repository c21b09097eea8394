package server

import (
	"io"

	"github.com/memosrt/memosrt"
	"net/http"
	"strings"
	"testing"
)

// With serve --compose, POST /v1/cubes/{cube}/chunks makes the cube's
// memory chunks (listed by GET …/pack with kind-bearing labels), a chat
// turn retrieving them reports them composed on the native, Ollama and
// OpenAI APIs, and /metrics counts the composed turns and tokens.
func TestComposeRoutes(t *testing.T) {
	e := newEnv(t, envConfig{mo: memosrt.Options{Compose: 0.15}, nseq: 1})
	addCube(t, e, "lily", lilyMemories...)
	var made struct{ Made, Present int }
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/chunks", map[string]any{}, &made); code != http.StatusOK || made.Made != 3 {
		t.Fatalf("chunks: %d %+v", code, made)
	}
	var st struct {
		Packs []struct{ Label string }
	}
	do(t, "GET", e.url()+"/v1/cubes/lily/pack", nil, &st)
	chunks := 0
	for _, pk := range st.Packs {
		if strings.HasPrefix(pk.Label, "chunk:lily:") {
			chunks++
		}
	}
	if chunks != 3 {
		t.Fatalf("pack listing: %d chunks in %+v", chunks, st.Packs)
	}
	// three routes, each a new question: the slot keeps only the exact
	// prefix before a composed block, so each composes again
	var native struct {
		Usage struct {
			Composed   int `json:"composed_tokens"`
			Recomputed int `json:"recomputed_tokens"`
		}
	}
	if code := do(t, "POST", e.url()+"/v1/generate", map[string]any{"cube": "lily", "num_predict": 2,
		"messages": []map[string]string{{"role": "user", "content": "What does Max like to do?"}}}, &native); code != http.StatusOK || native.Usage.Composed == 0 {
		t.Fatalf("native: %d, %+v", code, native)
	}
	var ollama map[string]any
	if code := do(t, "POST", e.url()+"/api/chat", map[string]any{"model": testModel, "stream": false, "options": map[string]any{"num_predict": 2, "cube": "lily"},
		"messages": []map[string]string{{"role": "user", "content": "Where does Max run?"}}}, &ollama); code != http.StatusOK || ollama["prompt_composed_count"].(float64) == 0 {
		t.Fatalf("ollama: %d, %v", code, ollama)
	}
	var oai struct {
		Usage struct {
			Details struct {
				Composed int `json:"composed_tokens"`
			} `json:"prompt_tokens_details"`
		}
	}
	if code := do(t, "POST", e.url()+"/v1/chat/completions", map[string]any{"model": testModel, "max_tokens": 2, "cube": "lily",
		"messages": []map[string]string{{"role": "user", "content": "Who is Lily?"}}}, &oai); code != http.StatusOK || oai.Usage.Details.Composed == 0 {
		t.Fatalf("openai: %d, %+v", code, oai)
	}
	resp, err := http.Get(e.url() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := string(b)
	if !strings.Contains(m, "memosrt_composed_turns_total ") || strings.Contains(m, "memosrt_composed_turns_total 0\n") ||
		!strings.Contains(m, `memosrt_prompt_tokens_total{kind="composed"}`) {
		t.Fatalf("metrics lack composed turns:\n%s", grepLines(m, "compos"))
	}
	// packs are composed only under --compose auto, once the gate passed
	// a fraction (pipeline.TestComposePack)
	if !strings.Contains(m, "memosrt_composed_packs_total 0\n") {
		t.Fatalf("metrics: composed packs not 0 under --compose on:\n%s", grepLines(m, "compos"))
	}
}
