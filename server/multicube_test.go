package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/kvcache"
)

// The memories of the multi-cube tests: two users', a shop's and an
// assistant's, one each.
const (
	aliceMem     = "Alice likes green tea."
	bobMem       = "Bob likes black coffee."
	shopMem      = "The tea shop opens at nine."
	assistantMem = "The assistant answers with short stories."
)

// threeCubes makes the cubes of the multi-cube tests (assistant-x marked
// an assistant's) and warms the shared ones, so that their memories are
// in their packs (the prompt's shared prefix).
func threeCubes(t *testing.T, e *env) {
	t.Helper()
	addCube(t, e, "alice", aliceMem)
	addCube(t, e, "bob", bobMem)
	addCube(t, e, "shop", shopMem)
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "assistant-x", "assistant": true}, nil); code != http.StatusCreated {
		t.Fatalf("create assistant-x: %d", code)
	}
	if code := do(t, "POST", e.url()+"/v1/cubes/assistant-x/memories", map[string]string{"text": assistantMem}, nil); code != http.StatusCreated {
		t.Fatalf("add to assistant-x: %d", code)
	}
	for _, c := range []string{"shop", "assistant-x"} {
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c+"/pack", map[string]any{}, nil); code != http.StatusOK {
			t.Fatalf("warm %s: %d", c, code)
		}
	}
}

// cubeCounts returns how many memories each cube holds.
func cubeCounts(t *testing.T, e *env, cubes ...string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, c := range cubes {
		ms, err := e.mem.List(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		out[c] = len(ms)
	}
	return out
}

// sharedPrefixTokens returns the tokens of rendered (a rendered prompt
// naming shop and assistant-x) up to the end of the shared cubes' pack
// lines: the prefix two users' prompts share.
func sharedPrefixTokens(t *testing.T, e *env, rendered string) int {
	t.Helper()
	end := strings.Index(rendered, "- "+assistantMem+"\n")
	if end < 0 {
		t.Fatalf("no assistant line in %q", rendered)
	}
	toks, err := e.eng.Tokenize(rendered[:end+len("- "+assistantMem+"\n")], true)
	if err != nil {
		t.Fatal(err)
	}
	return len(toks)
}

// usageCubes reads memosrt's cube_memories out of an OpenAI usage object.
func usageCubes(t *testing.T, u openai.CompletionUsage) map[string]int {
	t.Helper()
	var v struct {
		CubeMemories map[string]int `json:"cube_memories"`
	}
	if err := json.Unmarshal([]byte(u.RawJSON()), &v); err != nil {
		t.Fatal(err)
	}
	return v.CubeMemories
}

// TestMultiCubeClients is the three-cube assistant through the official
// Go clients: alice's chat naming [alice, shop, assistant-x] carries a
// memory of each (the rendered prompt: the shared cubes' pack first, then
// the retrieved block), writes only to alice; bob's chat naming [bob,
// shop, assistant-x] then restores the shared cubes' prefix that alice's
// turn stored.
func TestMultiCubeClients(t *testing.T) {
	e := newEnv(t, envConfig{})
	threeCubes(t, e)
	ctx := context.Background()
	all := []string{"alice", "bob", "shop", "assistant-x"}
	before := cubeCounts(t, e, all...)
	if want := map[string]int{"alice": 1, "bob": 1, "shop": 1, "assistant-x": 1}; !mapsEqual(before, want) {
		t.Fatalf("before: %v", before)
	}
	question := "Where can I get some tea"

	// the rendered prompt (Ollama's _debug_render_only): the shared cubes'
	// pack members in the order named, then alice's memory retrieved
	var rendered string
	err := ollamaClient(t, e.url()).Chat(ctx, &api.ChatRequest{Model: testModel, DebugRenderOnly: true,
		Messages: []api.Message{{Role: "user", Content: question}},
		Options:  map[string]any{"cubes": []string{"alice", "shop", "assistant-x"}}}, func(r api.ChatResponse) error {
		if r.DebugInfo != nil {
			rendered = r.DebugInfo.RenderedTemplate
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "You are a helpful assistant. What you remember about the user:" + "\n- " + shopMem + "\n- " + assistantMem + "\n\nAlso relevant:\n- " + aliceMem + "\n" + question
	if rendered != want {
		t.Fatalf("rendered\n%q, want\n%q", rendered, want)
	}
	sharedN := sharedPrefixTokens(t, e, rendered)

	oa := openaiClient(e.url())
	chat := func(user string, opts ...option.RequestOption) *openai.ChatCompletion {
		t.Helper()
		p := openai.ChatCompletionNewParams{Model: testModel, MaxTokens: openai.Int(8), Temperature: openai.Float(0),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(question)}}
		if user == "alice" {
			p.Metadata = shared.Metadata{"cubes": "alice,shop,assistant-x"}
		}
		r, err := oa.Chat.Completions.New(ctx, p, opts...)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "pack writes", func() bool { return e.os.Stats().PendingWrites == 0 })
		return r
	}
	ra := chat("alice")
	if got := usageCubes(t, ra.Usage); !mapsEqual(got, map[string]int{"alice": 1, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("alice's cube_memories %v", got)
	}
	if ra.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("alice's first chat: %d cached", ra.Usage.PromptTokensDetails.CachedTokens)
	}
	var packs struct{ Packs []kvcache.Info }
	do(t, "GET", e.url()+"/v1/packs", nil, &packs)
	var sharedPacks []kvcache.Info
	for _, p := range packs.Packs {
		if strings.HasPrefix(p.Label, "shared:") {
			sharedPacks = append(sharedPacks, p)
		}
	}
	if len(sharedPacks) != 1 || sharedPacks[0].Label != "shared:shop+assistant-x" || sharedPacks[0].NTokens != sharedN {
		t.Fatalf("shared packs %+v, want one of %d tokens", sharedPacks, sharedN)
	}

	// bob, through the comma-separated header: the shared prefix restored
	rb := chat("bob", option.WithHeader(CubeHeader, "bob,shop,assistant-x"))
	if got := usageCubes(t, rb.Usage); !mapsEqual(got, map[string]int{"bob": 1, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("bob's cube_memories %v", got)
	}
	if got := rb.Usage.PromptTokensDetails.CachedTokens; got != int64(sharedN) {
		t.Fatalf("bob's chat: %d cached, the shared prefix is %d tokens", got, sharedN)
	}

	// only the users' cubes were written (their turns recorded)
	testutil.WaitFor(t, "turns written", func() bool {
		c := cubeCounts(t, e, "alice", "bob")
		return c["alice"] == 2 && c["bob"] == 2
	})
	if got := cubeCounts(t, e, all...); !mapsEqual(got, map[string]int{"alice": 2, "bob": 2, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("after: %v", got)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
