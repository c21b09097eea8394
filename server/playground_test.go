package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/textmem"
)

// memoryIDs are the fields of a native answer (memosrt.Response) that
// name the memories its prompt carried.
type memoryIDs struct {
	Response     string   `json:"response"`
	PackMemories int      `json:"pack_memories"`
	Retrieved    int      `json:"retrieved_memories"`
	PackIDs      []string `json:"pack_memory_ids"`
	RetrievedIDs []string `json:"retrieved_memory_ids"`
}

// addPlayMemories adds texts to cube one by one and returns their ids in
// order.
func addPlayMemories(t *testing.T, u, cube string, hdr []string, texts ...string) []string {
	t.Helper()
	var ids []string
	for _, text := range texts {
		var m textmem.Memory
		if code := do(t, "POST", u+"/v1/cubes/"+cube+"/memories", map[string]string{"text": text}, &m, hdr...); code != http.StatusCreated {
			t.Fatalf("add %q: %d", text, code)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

// The native answer names the memories its prompt carried: the pack's in
// pack order, the retrieved ones for the last user turn; both lists are
// empty ([], not null) without a cube, and on the streamed last line too.
func TestResponseMemoryIDs(t *testing.T) {
	e := newEnv(t, envConfig{})
	u := e.url()
	packed := addPlayMemories(t, u, "lily", nil, lilyMemories...)
	if code := do(t, "POST", u+"/v1/cubes/lily/pack", nil, nil); code != http.StatusOK {
		t.Fatalf("warm: %d", code)
	}
	kite := addPlayMemories(t, u, "lily", nil, "Lily flies a red kite.")
	msgs := []memosrt.Message{{Role: "user", Content: "What colour is Lily's kite?"}}

	for _, c := range []struct {
		name          string
		body          map[string]any
		pack, visited []string
	}{
		{"chat", map[string]any{"cube": "lily", "messages": msgs, "num_predict": 4}, packed, kite},
		{"generate", map[string]any{"cube": "lily", "prompt": "Does Lily fly a kite?", "num_predict": 4}, packed, kite},
		{"plain", map[string]any{"prompt": "Does Lily fly a kite?", "num_predict": 4}, []string{}, []string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got memoryIDs
			if code := do(t, "POST", u+"/v1/generate", c.body, &got); code != http.StatusOK {
				t.Fatalf("generate: %d", code)
			}
			if got.PackIDs == nil || got.RetrievedIDs == nil || !slices.Equal(got.PackIDs, c.pack) || !slices.Equal(got.RetrievedIDs, c.visited) {
				t.Fatalf("pack ids %q, retrieved ids %q; want %q, %q", got.PackIDs, got.RetrievedIDs, c.pack, c.visited)
			}
			if got.PackMemories != len(c.pack) || got.Retrieved != len(c.visited) {
				t.Fatalf("counts pack %d, retrieved %d; want %d, %d", got.PackMemories, got.Retrieved, len(c.pack), len(c.visited))
			}
		})
	}

	t.Run("streamed", func(t *testing.T) {
		l := stream(t, context.Background(), u+"/v1/generate", map[string]any{"cube": "lily", "messages": msgs, "num_predict": 4, "stream": true, "record": "none"})
		defer l.close()
		var last []byte
		for l.sc.Scan() {
			last = slices.Clone(l.sc.Bytes())
		}
		var end struct {
			Done   bool      `json:"done"`
			Result memoryIDs `json:"result"`
		}
		if err := json.Unmarshal(last, &end); err != nil {
			t.Fatalf("last line %q: %v", last, err)
		}
		if !end.Done || !slices.Equal(end.Result.PackIDs, packed) || !slices.Equal(end.Result.RetrievedIDs, kite) {
			t.Fatalf("last line %s; want pack ids %q, retrieved %q", last, packed, kite)
		}
	})

	// the Ollama upstream backend assembles the prompt with the same
	// layout and reports the same ids (no warm without a model: no pack;
	// hybrid retrieval with the hash embedder finds both, the match first)
	t.Run("upstream", func(t *testing.T) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			json.NewEncoder(w).Encode(map[string]any{"model": "m", "message": map[string]string{"role": "assistant", "content": "Red."},
				"done": true, "done_reason": "stop", "eval_count": 2})
		}))
		defer up.Close()
		f := newEnv(t, envConfig{noEngine: true, mo: memosrt.Options{Upstream: &memosrt.UpstreamOptions{URL: up.URL, Model: "m"}}})
		ids := addPlayMemories(t, f.url(), "lily", nil, "Lily flies a red kite.", "Tom bakes bread.")
		var got memoryIDs
		if code := do(t, "POST", f.url()+"/v1/generate", map[string]any{"cube": "lily", "messages": msgs, "record": "none"}, &got); code != http.StatusOK {
			t.Fatalf("generate: %d", code)
		}
		if got.Response != "Red." || got.PackIDs == nil || len(got.PackIDs) != 0 || !slices.Equal(got.RetrievedIDs, ids) || got.Retrieved != 2 {
			t.Fatalf("upstream answer %+v; want no pack ids, retrieved %q (the match first)", got, ids)
		}
	})
}
