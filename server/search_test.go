package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/shared"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/mcp"
	"github.com/memosrt/memosrt/textmem"
)

// quickStart runs README.md's five-minute tour on e: the two memories
// `mem add` stores (Source "cli"), `kv warm` (they become the cube's pack,
// so every answer sees them), `run`, the memory the curl adds, then the
// three chats (curl, the Ollama client, the OpenAI client), each recorded
// in cube lily as a turn. The chats decode greedily, so the recorded answers
// are the same in every run.
func quickStart(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	for _, text := range []string{"Lily has a dog named Max.", "Max is brown and likes to run in the park."} {
		if _, err := e.os.AddMemory(ctx, "lily", textmem.Memory{Text: text, Source: "cli"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.os.Warm(ctx, "lily", memosrt.WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.os.Generate(ctx, memosrt.Request{Cube: "lily", Prompt: "Once upon a time, Lily", NumPredict: 32}); err != nil {
		t.Fatal(err)
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/lily/memories", map[string]any{"text": "Lily loves apple pie."}, nil); code != http.StatusCreated {
		t.Fatalf("add apple pie: %d", code)
	}
	var chat api.ChatResponse
	body := map[string]any{"model": testModel, "messages": []map[string]string{{"role": "user", "content": "Once upon a time"}},
		"stream": false, "options": map[string]any{"num_predict": 32, "temperature": 0}}
	if code := do(t, "POST", e.url()+"/api/chat", body, &chat, "X-Memosrt-Cube", "lily"); code != http.StatusOK || chat.Message.Content == "" {
		t.Fatalf("curl chat: %d %+v", code, chat)
	}
	oc := ollamaClient(t, e.url())
	f := false
	err := oc.Chat(ctx, &api.ChatRequest{Model: testModel, Stream: &f, Options: map[string]any{"num_predict": 32, "temperature": 0, "cube": "lily"},
		Messages: []api.Message{{Role: "user", Content: "Once upon a time, Lily"}}}, func(api.ChatResponse) error { return nil })
	if err != nil {
		t.Fatalf("ollama chat: %v", err)
	}
	c := openaiClient(e.url())
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(32), Temperature: openai.Float(0),
		Metadata: shared.Metadata{"cube": "lily"}, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Where does Max run?")}})
	if err != nil {
		t.Fatalf("openai chat: %v", err)
	}
}

// TestQuickStartSearch: after the tour, `search?q=dog` answers with the
// memories the user wrote, "Lily has a dog named Max." first, and none of
// the recorded turns (whose answers are the model's own text); MCP
// search_memory too. Asked for turns (include_turns, GET and POST, or
// kinds naming "turn"), the search returns them after every stored
// memory. With and without an embedder (serve has none by default; the
// test env's hash embedder fuses dense ranks in).
func TestQuickStartSearch(t *testing.T) {
	const dog, park, pie = "Lily has a dog named Max.", "Max is brown and likes to run in the park.", "Lily loves apple pie."
	turns := []string{"Once upon a time\n", "Once upon a time, Lily\n", "Where does Max run?\n"}
	for _, tc := range []struct {
		name    string
		noEmbed bool
		facts   []string // what q=dog finds besides turns, best first
	}{
		// the park memory is the dog's neighbour (both from `mem add`:
		// Source "cli"); the dense ranks reach every memory
		{"lexical", true, []string{dog, park}},
		{"dense", false, []string{dog, park, pie}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{nctx: 1024, noEmbed: tc.noEmbed, mo: memosrt.Options{NoScheduler: true}})
			quickStart(t, e)
			var all []textmem.Memory
			if code := do(t, "GET", e.url()+"/v1/cubes/lily/memories", nil, &struct{ Memories *[]textmem.Memory }{&all}); code != http.StatusOK {
				t.Fatalf("list: %d", code)
			}
			var said int
			for _, m := range all {
				if m.Kind == memosrt.KindTurn && strings.Contains(strings.ToLower(m.Text), "dog") {
					said++
				}
			}
			if said == 0 {
				t.Fatalf("no recorded turn says dog, nothing to outrank: %+v", all)
			}
			u := e.url() + "/v1/cubes/lily/search"
			for _, q := range []struct {
				name, method, url string
				body              any
				turns             bool
			}{
				{"GET", "GET", u + "?q=dog", nil, false},
				{"POST", "POST", u, map[string]any{"query": "dog"}, false},
				{"GET include_turns=false", "GET", u + "?q=dog&include_turns=false", nil, false},
				{"GET include_turns", "GET", u + "?q=dog&include_turns=true", nil, true},
				{"POST include_turns", "POST", u, map[string]any{"query": "dog", "include_turns": true}, true},
			} {
				var res struct{ Hits []textmem.Hit }
				if code := do(t, q.method, q.url, q.body, &res); code != http.StatusOK {
					t.Fatalf("%s: %d", q.name, code)
				}
				checkFactsFirst(t, q.name, res.Hits, tc.facts, turns, q.turns)
			}
			var res struct{ Hits []textmem.Hit }
			if code := do(t, "POST", u, map[string]any{"query": "dog", "kinds": []string{memosrt.KindTurn}}, &res); code != http.StatusOK {
				t.Fatalf("kinds turn: %d", code)
			}
			checkFactsFirst(t, "kinds turn", res.Hits, nil, turns, true)
			if code := do(t, "GET", u+"?q=dog&include_turns=yes", nil, nil); code != http.StatusBadRequest {
				t.Errorf("include_turns=yes: %d, want 400", code)
			}

			cs := mcpSession(t, e)
			for _, in := range []bool{false, true} {
				var out mcp.SearchOut
				mustTool(t, cs, "search_memory", map[string]any{"cube": "lily", "query": "dog", "include_turns": in}, &out)
				hits := make([]textmem.Hit, len(out.Hits))
				for i, h := range out.Hits {
					hits[i] = textmem.Hit{Memory: textmem.Memory{ID: h.ID, Text: h.Text, Kind: h.Kind}, Score: h.Score}
				}
				checkFactsFirst(t, fmt.Sprintf("MCP include_turns %v", in), hits, tc.facts, turns, in)
			}
		})
	}
}

// checkFactsFirst fails t unless hits are the memories facts, in that
// order, followed, when withTurns, by one hit of Kind turn per text of
// turns (the user's message the turn starts with), in any order.
func checkFactsFirst(t *testing.T, name string, hits []textmem.Hit, facts, turns []string, withTurns bool) {
	t.Helper()
	var got []string
	for _, h := range hits {
		got = append(got, h.Memory.Kind+": "+h.Memory.Text)
	}
	want := len(facts)
	if withTurns {
		want += len(turns)
	}
	if len(hits) != want {
		t.Fatalf("%s: %d hits, want %d (%d memories then %v turns):\n%s", name, len(hits), want, len(facts), withTurns, strings.Join(got, "\n"))
	}
	for i, f := range facts {
		if m := hits[i].Memory; m.Text != f || m.Kind == memosrt.KindTurn {
			t.Errorf("%s: hit %d is %q (kind %q), want %q:\n%s", name, i, m.Text, m.Kind, f, strings.Join(got, "\n"))
		}
	}
	left := slices.Clone(turns)
	for _, h := range hits[len(facts):] {
		j := slices.IndexFunc(left, func(p string) bool { return strings.HasPrefix(h.Memory.Text, p) })
		if h.Memory.Kind != memosrt.KindTurn || j < 0 {
			t.Errorf("%s: %q (kind %q) after the memories, want a turn starting with one of %q:\n%s", name, h.Memory.Text, h.Memory.Kind, left, strings.Join(got, "\n"))
			continue
		}
		left = slices.Delete(left, j, j+1)
	}
}
