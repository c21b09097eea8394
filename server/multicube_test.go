package server

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"
	"github.com/openai/openai-go/shared"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/server/mcp"
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
	// the restored prefix gives the output a full prefill gives (greedy)
	var cold memosrt.Response
	body := map[string]any{"cubes": []string{"bob", "shop", "assistant-x"}, "messages": []map[string]string{{"role": "user", "content": question}},
		"num_predict": 8, "no_cache": true, "no_persist": true, "record": "none"}
	if code := do(t, "POST", e.url()+"/v1/generate", body, &cold); code != http.StatusOK {
		t.Fatalf("cold: %d", code)
	}
	if cold.Text != rb.Choices[0].Message.Content || cold.Usage.CachedTokens != 0 || cold.Usage.PromptTokens != int(rb.Usage.PromptTokens) {
		t.Fatalf("cold %q (%d prompt tokens), restored %q (%d)", cold.Text, cold.Usage.PromptTokens, rb.Choices[0].Message.Content, rb.Usage.PromptTokens)
	}

	// heat goes to the cube each memory lives in: shop's and assistant-x's
	// pack member was in the three chats (an interaction each), alice's
	// memory retrieved once (a visit and an interaction), bob's twice
	for cube, want := range map[string][2]float64{"shop": {0, 3}, "assistant-x": {0, 3}, "alice": {1, 1}, "bob": {2, 2}} {
		type memTier struct {
			Text  string
			Usage struct{ V, I float64 }
		}
		var tiers struct{ Memories []memTier }
		do(t, "GET", e.url()+"/v1/cubes/"+cube+"/tiers", nil, &tiers)
		text := map[string]string{"shop": shopMem, "assistant-x": assistantMem, "alice": aliceMem, "bob": bobMem}[cube]
		i := slices.IndexFunc(tiers.Memories, func(m memTier) bool { return m.Text == text })
		if i < 0 {
			t.Fatalf("%s's tiers: %+v", cube, tiers.Memories)
		}
		u := tiers.Memories[i].Usage
		if math.Abs(u.V-want[0]) > 0.01 || math.Abs(u.I-want[1]) > 0.01 {
			t.Fatalf("%s's memory: visits %.3f, interactions %.3f, want %v", cube, u.V, u.I, want)
		}
	}

	// only the users' cubes were written (their turns recorded)
	testutil.WaitFor(t, "turns written", func() bool {
		c := cubeCounts(t, e, "alice", "bob")
		return c["alice"] == 2 && c["bob"] == 2
	})
	if got := cubeCounts(t, e, all...); !mapsEqual(got, map[string]int{"alice": 2, "bob": 2, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("after: %v", got)
	}
	// each user's turn names the assistant's cube it read: its extraction
	// writes procedures there
	for _, u := range []string{"alice", "bob"} {
		var turns struct{ Turns []convmem.Turn }
		do(t, "GET", e.url()+"/v1/cubes/"+u+"/turns", nil, &turns)
		if len(turns.Turns) != 1 || turns.Turns[0].User != question || turns.Turns[0].AssistantCube != "assistant-x" {
			t.Fatalf("%s's turns %+v", u, turns.Turns)
		}
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

// TestMultiCubeRequests: what a request naming several cubes is refused
// for, and what an access key needs (write on the first cube, read on the
// others).
func TestMultiCubeRequests(t *testing.T) {
	e := newEnv(t, envConfig{opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range []string{"alice", "shop", "assistant-x"} {
		if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": c, "assistant": c == "assistant-x"}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("create %s: %d", c, code)
		}
	}
	gen := func(body map[string]any, hdr ...string) (int, string) {
		t.Helper()
		body["messages"] = []map[string]string{{"role": "user", "content": "Hello"}}
		body["num_predict"] = 1
		return errorOf(t, "POST", e.url()+"/v1/generate", body, hdr...)
	}
	nine := []string{"alice", "shop", "assistant-x", "c4", "c5", "c6", "c7", "c8", "c9"}
	for _, c := range []struct {
		name   string
		body   map[string]any
		hdr    []string
		status int
		msg    string
	}{
		{"three", map[string]any{"cubes": []string{"alice", "shop", "assistant-x"}}, nil, 200, ""},
		{"cube and cubes agree", map[string]any{"cube": "alice", "cubes": []string{"alice", "shop"}}, nil, 200, ""},
		{"repeated", map[string]any{"cubes": []string{"alice", "shop", "shop", "alice"}}, nil, 200, ""},
		{"too many", map[string]any{"cubes": nine}, nil, 400, "cubes: 9 cubes, at most 8"},
		{"nine names, two cubes", map[string]any{"cubes": []string{"alice", "shop", "shop", "shop", "shop", "shop", "shop", "shop", "shop"}}, nil, 200, ""},
		{"nine names in the header, two cubes", map[string]any{}, []string{CubeHeader, "alice,shop,shop,shop,shop,shop,shop,shop,shop"}, 200, ""},
		{"bad name", map[string]any{"cubes": []string{"alice", "no/pe"}}, nil, 400, `cubes: "no/pe"`},
		{"unknown", map[string]any{"cubes": []string{"alice", "nosuch"}}, nil, 404, "nosuch"},
		{"first differs", map[string]any{"cube": "shop", "cubes": []string{"alice", "shop"}}, nil, 400, `cubes: the first cube is "alice", but cube names "shop"`},
		{"header differs", map[string]any{"cubes": []string{"alice", "shop"}}, []string{CubeHeader, "alice,assistant-x"}, 400, "cubes:"},
		{"header names the first", map[string]any{"cubes": []string{"alice", "shop"}}, []string{CubeHeader, "alice"}, 200, ""},
		{"header names another", map[string]any{"cubes": []string{"alice", "shop"}}, []string{CubeHeader, "shop"}, 400, "cubes:"},
		{"header", map[string]any{}, []string{CubeHeader, "alice, shop"}, 200, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, msg := gen(c.body, append(slices.Clone(admin), c.hdr...)...)
			if status != c.status || !strings.Contains(msg, c.msg) {
				t.Fatalf("status %d %q, want %d %q", status, msg, c.status, c.msg)
			}
		})
	}
	var turns struct{ Turns []convmem.Turn }
	do(t, "GET", e.url()+"/v1/cubes/alice/turns", nil, &turns, admin...)
	var named []string
	for _, tr := range turns.Turns {
		named = append(named, tr.AssistantCube)
	}
	// the seven chats answered: the first read assistant-x, the others not
	if !slices.Equal(named, []string{"assistant-x", "", "", "", "", "", ""}) {
		t.Fatalf("assistant cubes of alice's turns %q", named)
	}
	three := map[string]any{"cubes": []string{"alice", "shop", "assistant-x"}}
	for _, c := range []struct {
		name   string
		grants []map[string]string
		status int
	}{
		{"write first, read others", []map[string]string{{"cube": "alice", "right": "write"}, {"cube": "shop", "right": "read"}, {"cube": "assistant-x", "right": "read"}}, 200},
		{"read first", []map[string]string{{"cube": "alice", "right": "read"}, {"cube": "shop", "right": "read"}, {"cube": "assistant-x", "right": "read"}}, 403},
		{"one not granted", []map[string]string{{"cube": "alice", "right": "write"}, {"cube": "shop", "right": "read"}}, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := makeKey(t, e, map[string]any{"cubes": c.grants})
			if status, msg := gen(maps.Clone(three), "Authorization", "Bearer "+k.Token); status != c.status {
				t.Fatalf("status %d %q, want %d", status, msg, c.status)
			}
			if c.status != 200 {
				return
			}
			// the key may only read assistant-x: its turn names no assistant
			// cube, so extraction writes nothing there
			var turns struct{ Turns []convmem.Turn }
			do(t, "GET", e.url()+"/v1/cubes/alice/turns", nil, &turns, admin...)
			if n := len(turns.Turns); n == 0 || turns.Turns[n-1].AssistantCube != "" {
				t.Fatalf("alice's turns %+v", turns.Turns)
			}
		})
	}
}

// TestAssistantCubeMessages: the messages API with assistant_cube writes
// the procedure extracted to the assistant's cube, the rest to the user's;
// a cube not marked an assistant's is refused.
func TestAssistantCubeMessages(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	addCube(t, e, "alice")
	addCube(t, e, "shop")
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "assistant-x", "assistant": true}, nil); code != http.StatusCreated {
		t.Fatalf("create assistant-x: %d", code)
	}
	var rec struct {
		Assistant bool `json:"assistant"`
	}
	if do(t, "GET", e.url()+"/v1/cubes/assistant-x", nil, &rec); !rec.Assistant {
		t.Fatalf("GET assistant-x: not an assistant's")
	}
	msgs := []map[string]string{{"role": "user", "content": "I like green tea."}, {"role": "assistant", "content": "Noted."},
		{"role": "user", "content": "To brew it I boil water first, then steep the leaves for three minutes."}}
	if status, msg := errorOf(t, "POST", e.url()+"/v1/cubes/alice/messages", map[string]any{"messages": msgs, "assistant_cube": "shop"}); status != 400 ||
		!strings.Contains(msg, "assistant_cube") {
		t.Fatalf("a cube not an assistant's: %d %q", status, msg)
	}
	var out struct{ Job struct{ ID string } }
	if code := do(t, "POST", e.url()+"/v1/cubes/alice/messages", map[string]any{"messages": msgs, "assistant_cube": "assistant-x"}, &out); code != http.StatusAccepted {
		t.Fatalf("messages: %d", code)
	}
	testutil.WaitFor(t, "the job", func() bool {
		var j struct{ State string }
		do(t, "GET", e.url()+"/v1/cubes/alice/jobs/"+out.Job.ID, nil, &j)
		return j.State == "done"
	})
	kinds := func(cube string) []string {
		ms, err := e.mem.List(context.Background(), cube)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			if strings.HasPrefix(m.Source, "extract:") {
				out = append(out, m.Kind)
			}
		}
		return out
	}
	if got := kinds("alice"); !slices.Equal(got, []string{"preference"}) {
		t.Errorf("alice: %v", got)
	}
	if got := kinds("assistant-x"); !slices.Equal(got, []string{"procedure"}) {
		t.Errorf("assistant-x: %v", got)
	}
	if got := kinds("shop"); len(got) != 0 {
		t.Errorf("shop: %v", got)
	}
	// the mark survives an export and an import under another name
	export := serve(e.srv, "GET", "/v1/cubes/assistant-x/export", nil)
	if export.Code != http.StatusOK {
		t.Fatalf("export: %d", export.Code)
	}
	if imp := serve(e.srv, "POST", "/v1/cubes/import?cube=assistant-y", export.Body.Bytes()); imp.Code != http.StatusCreated && imp.Code != http.StatusOK {
		t.Fatalf("import: %d %s", imp.Code, imp.Body.String())
	}
	rec.Assistant = false
	if do(t, "GET", e.url()+"/v1/cubes/assistant-y", nil, &rec); !rec.Assistant {
		t.Fatal("assistant-y after the import: not an assistant's")
	}
}

// TestMultiCubeMCP is the three-cube assistant through the MCP SDK
// client: chat with cubes carries a memory of each cube and writes only
// to the first; bob's chat restores the shared prefix; search_memory
// over several cubes names each hit's cube.
func TestMultiCubeMCP(t *testing.T) {
	e := newEnv(t, envConfig{})
	threeCubes(t, e)
	cs := mcpSession(t, e)
	all := []string{"alice", "bob", "shop", "assistant-x"}
	chat := func(user string) mcp.ChatOut {
		t.Helper()
		var out mcp.ChatOut
		mustTool(t, cs, "chat", map[string]any{"cubes": []string{user, "shop", "assistant-x"}, "message": "Where can I get some tea", "num_predict": 8}, &out)
		testutil.WaitFor(t, "pack writes", func() bool { return e.os.Stats().PendingWrites == 0 })
		return out
	}
	a := chat("alice")
	if !mapsEqual(a.CubeMemories, map[string]int{"alice": 1, "shop": 1, "assistant-x": 1}) || a.CachedTokens != 0 {
		t.Fatalf("alice: %+v", a)
	}
	b := chat("bob")
	if !mapsEqual(b.CubeMemories, map[string]int{"bob": 1, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("bob: %+v", b)
	}
	var packs struct{ Packs []kvcache.Info }
	do(t, "GET", e.url()+"/v1/packs", nil, &packs)
	i := slices.IndexFunc(packs.Packs, func(p kvcache.Info) bool { return p.Label == "shared:shop+assistant-x" })
	if i < 0 || b.CachedTokens != packs.Packs[i].NTokens || b.CachedTokens == 0 {
		t.Fatalf("bob cached %d; packs %+v", b.CachedTokens, packs.Packs)
	}
	testutil.WaitFor(t, "turns written", func() bool {
		c := cubeCounts(t, e, "alice", "bob")
		return c["alice"] == 2 && c["bob"] == 2
	})
	if got := cubeCounts(t, e, all...); !mapsEqual(got, map[string]int{"alice": 2, "bob": 2, "shop": 1, "assistant-x": 1}) {
		t.Fatalf("after: %v", got)
	}
	var found mcp.SearchOut
	mustTool(t, cs, "search_memory", map[string]any{"cubes": []string{"alice", "shop"}, "query": "tea"}, &found)
	var got []string
	for _, h := range found.Hits {
		got = append(got, h.Cube+": "+h.Text)
	}
	if !slices.Contains(got, "alice: "+aliceMem) || !slices.Contains(got, "shop: "+shopMem) {
		t.Fatalf("hits %q", got)
	}
}

// TestMultiCubeDeleteShared: deleting a read cube deletes the shared packs
// holding its memories; the other cubes' packs stay.
func TestMultiCubeDeleteShared(t *testing.T) {
	e := newEnv(t, envConfig{})
	threeCubes(t, e)
	body := map[string]any{"cubes": []string{"alice", "shop", "assistant-x"}, "messages": []map[string]string{{"role": "user", "content": "Hello"}}, "num_predict": 4}
	if code := do(t, "POST", e.url()+"/v1/generate", body, nil); code != http.StatusOK {
		t.Fatalf("chat: %d", code)
	}
	testutil.WaitFor(t, "pack writes", func() bool { return e.os.Stats().PendingWrites == 0 })
	labels := func() []string {
		var packs struct{ Packs []kvcache.Info }
		do(t, "GET", e.url()+"/v1/packs", nil, &packs)
		var out []string
		for _, p := range packs.Packs {
			out = append(out, p.Label)
		}
		slices.Sort(out)
		return out
	}
	if got := labels(); !slices.Equal(got, []string{"assistant-x", "conv:alice", "shared:shop+assistant-x", "shop"}) {
		t.Fatalf("packs before %q", got)
	}
	if code := do(t, "DELETE", e.url()+"/v1/cubes/shop", nil, nil); code != http.StatusOK && code != http.StatusNoContent {
		t.Fatalf("delete shop: %d", code)
	}
	if got := labels(); !slices.Equal(got, []string{"assistant-x", "conv:alice"}) {
		t.Fatalf("packs after deleting shop %q", got)
	}
	if status, msg := errorOf(t, "POST", e.url()+"/v1/generate", body); status != http.StatusNotFound || !strings.Contains(msg, "shop") {
		t.Fatalf("a chat reading the deleted cube: %d %q", status, msg)
	}
}

// TestAssistantCubeMCP: MCP add_messages with assistant_cube, rule-based
// extraction (no model): the procedure goes to the assistant's cube, the
// preference to the user's.
func TestAssistantCubeMCP(t *testing.T) {
	e := newEnv(t, envConfig{noEngine: true})
	addCube(t, e, "alice")
	if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": "assistant-x", "assistant": true}, nil); code != http.StatusCreated {
		t.Fatalf("create assistant-x: %d", code)
	}
	cs := mcpSession(t, e)
	var added mcp.MessagesOut
	mustTool(t, cs, "add_messages", map[string]any{"cube": "alice", "assistant_cube": "assistant-x",
		"messages": []map[string]string{{"role": "user", "content": "I like green tea."},
			{"role": "user", "content": "To brew it I boil water first, then steep the leaves for three minutes."}}}, &added)
	testutil.WaitFor(t, "the job", func() bool {
		j, err := e.os.Job(context.Background(), "alice", added.Job.ID)
		return err == nil && j.State == "done"
	})
	for cube, want := range map[string][]string{"alice": {"preference"}, "assistant-x": {"procedure"}} {
		ms, err := e.mem.List(context.Background(), cube)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range ms {
			if strings.HasPrefix(m.Source, "extract:") {
				got = append(got, m.Kind)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: extracted %v, want %v", cube, got, want)
		}
	}
	failTool(t, cs, "add_messages", map[string]any{"cube": "alice", "assistant_cube": "alice",
		"messages": []map[string]string{{"role": "user", "content": "I like tea."}}}, "not an assistant's")
}

// TestMultiCubeHeaderKey: with an access key, an X-Memosrt-Cube header
// naming several cubes is checked name by name (write on the first, read
// on the others) on every generate route and on /mcp, where the first is
// the default cube and a chat naming no cube reads the others too.
func TestMultiCubeHeaderKey(t *testing.T) {
	e := newEnv(t, envConfig{opts: Options{Token: "admin"}})
	admin := []string{"Authorization", "Bearer admin"}
	for _, c := range [][2]string{{"carol", "Carol likes green tea."}, {"shop", shopMem}, {"bob", bobMem}} {
		if code := do(t, "POST", e.url()+"/v1/cubes", map[string]any{"name": c[0]}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("create %s: %d", c[0], code)
		}
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c[0]+"/memories", map[string]string{"text": c[1]}, nil, admin...); code != http.StatusCreated {
			t.Fatalf("add to %s: %d", c[0], code)
		}
	}
	k := makeKey(t, e, map[string]any{"cubes": []map[string]string{{"cube": "carol", "right": "write"}, {"cube": "shop", "right": "read"}}})
	ro := makeKey(t, e, map[string]any{"cubes": []map[string]string{{"cube": "carol", "right": "read"}, {"cube": "shop", "right": "read"}}})
	msgs := []map[string]string{{"role": "user", "content": "Where can I get some tea"}}
	routes := []struct {
		path string
		body map[string]any
	}{
		{"/v1/generate", map[string]any{"messages": msgs, "num_predict": 2}},
		{"/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": map[string]any{"num_predict": 2}}},
		{"/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "max_tokens": 2}},
	}
	for _, r := range routes {
		for _, c := range []struct {
			token, header string
			status        int
		}{
			{k.Token, "carol,shop", 200},
			{k.Token, "carol, shop", 200},
			{k.Token, "carol,bob", 403},
			{ro.Token, "carol,shop", 403},
		} {
			status, raw := send(t, "POST", e.url()+r.path, r.body, "Authorization", "Bearer "+c.token, CubeHeader, c.header)
			if status != c.status {
				t.Fatalf("%s %q: %d %s, want %d", r.path, c.header, status, raw, c.status)
			}
			if status != 200 {
				continue
			}
			var v struct {
				CubeMemories map[string]int `json:"cube_memories"`
				Usage        struct {
					CubeMemories map[string]int `json:"cube_memories"`
				}
			}
			if err := json.Unmarshal(raw, &v); err != nil {
				t.Fatal(err)
			}
			got := v.CubeMemories
			if got == nil {
				got = v.Usage.CubeMemories
			}
			if !mapsEqual(got, map[string]int{"carol": 1, "shop": 1}) {
				t.Fatalf("%s %q: cube_memories %v in %s", r.path, c.header, got, raw)
			}
		}
	}
	cs := mcpSession(t, e, "Authorization", "Bearer "+k.Token, CubeHeader, "carol,shop")
	var out mcp.ChatOut
	mustTool(t, cs, "chat", map[string]any{"message": "Where can I get some tea", "num_predict": 2}, &out)
	if !mapsEqual(out.CubeMemories, map[string]int{"carol": 1, "shop": 1}) {
		t.Fatalf("mcp chat: %+v", out)
	}
	var found mcp.SearchOut
	mustTool(t, cs, "search_memory", map[string]any{"query": "tea"}, &found)
	var hits []string
	for _, h := range found.Hits {
		hits = append(hits, h.Cube+": "+h.Text)
	}
	if !slices.Contains(hits, "carol: Carol likes green tea.") || !slices.Contains(hits, "shop: "+shopMem) {
		t.Fatalf("mcp search hits %q", hits)
	}
	var added mcp.Memory
	mustTool(t, cs, "add_memory", map[string]any{"text": "Carol lives in Paris."}, &added)
	if got := cubeCounts(t, e, "carol", "shop"); got["shop"] != 1 {
		t.Fatalf("add_memory wrote to shop: %v", got)
	}
}

// TestSharedPackRestart: the shared pack alice's three-cube chat stores
// outlives a restart: bob's chat naming the same read cubes on the
// restarted server restores the shared prefix (its exact token count).
func TestSharedPackRestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, envConfig{dir: dir})
	threeCubes(t, e)
	question := "Where can I get some tea"
	var rendered string
	err := ollamaClient(t, e.url()).Chat(context.Background(), &api.ChatRequest{Model: testModel, DebugRenderOnly: true,
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
	sharedN := sharedPrefixTokens(t, e, rendered)
	chat := func(e *env, user string) memosrt.Usage {
		t.Helper()
		var out struct{ Usage memosrt.Usage }
		body := map[string]any{"cubes": []string{user, "shop", "assistant-x"}, "messages": []map[string]string{{"role": "user", "content": question}}, "num_predict": 2}
		if code := do(t, "POST", e.url()+"/v1/generate", body, &out); code != http.StatusOK {
			t.Fatalf("%s's chat: %d", user, code)
		}
		testutil.WaitFor(t, "pack writes", func() bool { return e.os.Stats().PendingWrites == 0 })
		return out.Usage
	}
	if u := chat(e, "alice"); u.CachedTokens != 0 {
		t.Fatalf("alice's chat: %d cached", u.CachedTokens)
	}
	e.close(t)
	e = newEnv(t, envConfig{dir: dir})
	if u := chat(e, "bob"); u.CachedTokens != sharedN || sharedN == 0 {
		t.Fatalf("bob's chat after a restart: %d cached, the shared prefix is %d tokens", u.CachedTokens, sharedN)
	}
}

// TestReadCubePreferences: the "User preferences:" block holds the
// preferences of the cube written to alone; a read cube's preference
// memories are retrieved as any other memory (exact rendered prompt).
func TestReadCubePreferences(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, c := range []struct{ cube, text string }{
		{"alice", "Alice prefers short answers about tea."},
		{"bob", "Bob prefers long answers about tea."},
	} {
		addCube(t, e, c.cube)
		if code := do(t, "POST", e.url()+"/v1/cubes/"+c.cube+"/memories", map[string]string{"text": c.text, "kind": "preference"}, nil); code != http.StatusCreated {
			t.Fatalf("add to %s: %d", c.cube, code)
		}
	}
	question := "How should answers about tea be?"
	var rendered string
	err := ollamaClient(t, e.url()).Chat(context.Background(), &api.ChatRequest{Model: testModel, DebugRenderOnly: true,
		Messages: []api.Message{{Role: "user", Content: question}},
		Options:  map[string]any{"cubes": []string{"alice", "bob"}}}, func(r api.ChatResponse) error {
		if r.DebugInfo != nil {
			rendered = r.DebugInfo.RenderedTemplate
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "User preferences:\n- Alice prefers short answers about tea.\nAlso relevant:\n- Bob prefers long answers about tea.\n" + question
	if !strings.HasSuffix(rendered, want) || strings.Count(rendered, "prefers") != 2 {
		t.Fatalf("rendered\n%q, want it to end\n%q", rendered, want)
	}
}

// TestCubeListErrors: an empty name in a cube list is a 400 naming the
// field on every API (header, native body, OpenAI metadata as a string or
// an array, Ollama options, MCP), and an error about the header's cubes
// names the header.
func TestCubeListErrors(t *testing.T) {
	e := newEnv(t, envConfig{})
	addCube(t, e, "alice", aliceMem)
	addCube(t, e, "shop", shopMem)
	msgs := []map[string]string{{"role": "user", "content": "Hello"}}
	nine := "alice,shop,c3,c4,c5,c6,c7,c8,c9"
	for _, c := range []struct {
		name, path string
		body       map[string]any
		hdr        []string
		param, msg string
	}{
		{"native", "/v1/generate", map[string]any{"cubes": []string{"alice", ""}, "messages": msgs}, nil, "cubes", "cubes: cube 2 is empty"},
		{"native, one empty name", "/v1/generate", map[string]any{"cubes": []string{""}, "messages": msgs}, nil, "cubes", "cubes: cube 1 is empty"},
		{"header", "/v1/generate", map[string]any{"messages": msgs}, []string{CubeHeader, "alice,,shop"}, CubeHeader,
			`X-Memosrt-Cube: cube 2 of "alice,,shop" is empty (names joined by commas)`},
		{"header, trailing comma", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs}, []string{CubeHeader, "alice,"}, CubeHeader,
			`X-Memosrt-Cube: cube 2 of "alice," is empty (names joined by commas)`},
		{"header, nine cubes", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs}, []string{CubeHeader, nine}, CubeHeader,
			"X-Memosrt-Cube: 9 cubes, at most 8"},
		{"openai string", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "metadata": map[string]string{"cubes": "alice,,shop"}}, nil,
			"metadata.cubes", "metadata.cubes: cube 2 is empty"},
		{"openai empty string", "/v1/chat/completions", map[string]any{"model": testModel, "messages": msgs, "metadata": map[string]string{"cubes": ""}}, nil,
			"metadata.cubes", "metadata.cubes: cube 1 is empty"},
		{"ollama", "/api/chat", map[string]any{"model": testModel, "messages": msgs, "stream": false, "options": map[string]any{"cubes": []string{"", "shop"}}}, nil,
			"options.cubes", "options.cubes: cube 1 is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, raw := send(t, "POST", e.url()+c.path, c.body, c.hdr...)
			var o oaiError
			var ol struct{ Error string }
			json.Unmarshal(raw, &o)
			json.Unmarshal(raw, &ol)
			msg := o.Error.Message
			if strings.HasPrefix(c.path, "/api/") {
				msg = ol.Error
			} else if o.Error.Param == nil || *o.Error.Param != c.param {
				t.Errorf("param %v, want %q", o.Error.Param, c.param)
			}
			if status != http.StatusBadRequest || msg != c.msg {
				t.Fatalf("%d %s, want 400 %q", status, raw, c.msg)
			}
		})
	}
	cs := mcpSession(t, e)
	failTool(t, cs, "chat", map[string]any{"cubes": []string{"alice", ""}, "message": "Hello"}, "cubes: cube 2 is empty")
	failTool(t, cs, "search_memory", map[string]any{"cubes": []string{""}, "query": "tea"}, "cubes: cube 1 is empty")
	bad := mcpSession(t, e, CubeHeader, "alice,")
	failTool(t, bad, "chat", map[string]any{"message": "Hello"}, `X-Memosrt-Cube: cube 2 of "alice," is empty`)
}
