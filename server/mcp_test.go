package server

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/server/mcp"
)

// headerRT adds fixed headers (the bearer token, X-Memosrt-Cube) to every
// request of the MCP client.
type headerRT struct{ hdr []string }

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for i := 0; i+1 < len(h.hdr); i += 2 {
		r.Header.Set(h.hdr[i], h.hdr[i+1])
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects the SDK client to e's /mcp with the given headers
// and closes it at the end of the test.
func mcpSession(t *testing.T, e *env, hdr ...string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "memosrt-test", Version: "0"}, nil)
	tr := &sdk.StreamableClientTransport{Endpoint: e.url() + "/mcp", HTTPClient: &http.Client{Transport: headerRT{hdr}}, MaxRetries: -1}
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls a tool and returns its result and text content;
// structured content, when out is not nil, is decoded into it.
func callTool(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, out any) (*sdk.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v", tool, args, err)
	}
	var text []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text = append(text, tc.Text)
		}
	}
	if out != nil && !res.IsError {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", tool, b, err)
		}
	}
	return res, strings.Join(text, "\n")
}

// mustTool calls a tool that must succeed.
func mustTool(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, out any) string {
	t.Helper()
	res, text := callTool(t, cs, tool, args, out)
	if res.IsError {
		t.Fatalf("%s %v: tool error %q", tool, args, text)
	}
	return text
}

// failTool calls a tool that must fail with a tool error containing want.
func failTool(t *testing.T, cs *sdk.ClientSession, tool string, args map[string]any, want string) {
	t.Helper()
	res, text := callTool(t, cs, tool, args, nil)
	t.Logf("%s %v: %s", tool, args, text)
	if !res.IsError || !strings.Contains(text, want) {
		t.Errorf("%s %v: error %v %q, want a tool error with %q", tool, args, res.IsError, text, want)
	}
}

// The MCP tools over /mcp, with the SDK's client: add, list, search,
// profile, chat (the reply is OS.Chat's cold output for the same request),
// delete.
func TestMCPRoundTrip(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024, opts: Options{Token: "admin"}, mo: memosrt.Options{NoScheduler: true}})
	cs := mcpSession(t, e, "Authorization", "Bearer admin")

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" {
			t.Errorf("tool %s has no description", tl.Name)
		}
	}
	if got := strings.Join(names, ","); got != "add_memory,add_messages,chat,delete_memory,feedback,get_profile,list_memories,search_memory" {
		t.Fatalf("tools: %s", got)
	}

	var dog, paint mcp.Memory
	mustTool(t, cs, "add_memory", map[string]any{"cube": "lily", "text": "Lily has a dog named Max.", "tags": []string{"pets"}}, &dog)
	mustTool(t, cs, "add_memory", map[string]any{"cube": "lily", "text": "Lily likes to paint flowers."}, &paint)
	if dog.ID == "" || dog.Text != "Lily has a dog named Max." || len(dog.Tags) != 1 || paint.ID == "" || paint.ID == dog.ID {
		t.Fatalf("added %+v, %+v", dog, paint)
	}
	var list mcp.ListOut
	mustTool(t, cs, "list_memories", map[string]any{"cube": "lily"}, &list)
	if list.Total != 2 || len(list.Memories) != 2 || list.Memories[0].ID != paint.ID || list.Memories[1].ID != dog.ID {
		t.Fatalf("list: %+v", list)
	}
	mustTool(t, cs, "list_memories", map[string]any{"cube": "lily", "limit": 1}, &list)
	if list.Total != 2 || len(list.Memories) != 1 || list.Memories[0].ID != paint.ID {
		t.Fatalf("list limit 1: %+v", list)
	}
	var hits mcp.SearchOut
	mustTool(t, cs, "search_memory", map[string]any{"cube": "lily", "query": "dog", "k": 1}, &hits)
	if len(hits.Hits) != 1 || hits.Hits[0].ID != dog.ID || hits.Hits[0].Score <= 0 {
		t.Fatalf("search dog: %+v", hits)
	}
	var prof mcp.ProfileOut
	text := mustTool(t, cs, "get_profile", map[string]any{"cube": "lily"}, &prof)
	// the search made the dog hotter (a visit): it comes first, though older
	if prof.Total != 2 || len(prof.Memories) != 2 || prof.Memories[0].ID != dog.ID || !strings.Contains(text, "Lily has a dog named Max.") ||
		!strings.Contains(prof.Profile, "Lily likes to paint flowers.") {
		t.Fatalf("profile %q: %+v", text, prof)
	}

	const msg = "Where does Max run?"
	var reply mcp.ChatOut
	text = mustTool(t, cs, "chat", map[string]any{"cube": "lily", "message": msg, "num_predict": 12}, &reply)
	if reply.Reply == "" || text != reply.Reply || reply.EvalTokens == 0 || reply.PromptTokens == 0 {
		t.Fatalf("chat: %q %+v", text, reply)
	}
	req := mcp.ChatRequest("lily", msg, 12)
	req.NoCache, req.NoPersist = true, true
	cold, err := e.os.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if cold.Text != reply.Reply {
		t.Fatalf("chat over MCP %q, OS.Chat cold %q", reply.Reply, cold.Text)
	}
	// feedback on the MCP chat's answer corrects the dog it used
	var fb memosrt.FeedbackResult
	text = mustTool(t, cs, "feedback", map[string]any{"cube": "lily", "response_id": reply.ID, "correction": "No, Lily has a dog named Rex."}, &fb)
	if fb.Action != memosrt.FeedbackSuperseded || fb.MemoryID != dog.ID || fb.PreviousText != "Lily has a dog named Max." || text != fb.Note {
		t.Fatalf("feedback: %q %+v", text, fb)
	}
	if m, err := e.os.Memory(context.Background(), "lily", dog.ID); err != nil || m.Text != "Lily has a dog named Rex." {
		t.Fatalf("dog after feedback: %+v %v", m, err)
	}
	failTool(t, cs, "feedback", map[string]any{"cube": "lily", "response_id": "resp_nope", "rating": 1}, "not found")
	failTool(t, cs, "feedback", map[string]any{"cube": "lily"}, "give a correction, a rating or stars")
	failTool(t, cs, "feedback", map[string]any{"cube": "lily", "response_id": reply.ID, "rating": 0}, "rating: 0: want -1 or 1")
	failTool(t, cs, "feedback", map[string]any{"cube": "lily", "response_id": reply.ID, "stars": 0}, "stars: 0: want 1 to 5")

	var del mcp.DeleteOut
	mustTool(t, cs, "delete_memory", map[string]any{"cube": "lily", "id": dog.ID}, &del)
	if del.Deleted != dog.ID {
		t.Fatalf("delete: %+v", del)
	}
	list = mcp.ListOut{}
	mustTool(t, cs, "list_memories", map[string]any{"cube": "lily"}, &list)
	// besides the two chats' recorded turns (Kind turn), only paint is left
	kept := slices.DeleteFunc(slices.Clone(list.Memories), func(m mcp.Memory) bool { return m.Kind == memosrt.KindTurn })
	if list.Total != 3 || len(list.Memories) != 3 || len(kept) != 1 || kept[0].ID != paint.ID {
		t.Fatalf("list after delete: %+v", list)
	}

	// errors are tool errors, and the session goes on
	failTool(t, cs, "delete_memory", map[string]any{"cube": "lily", "id": dog.ID}, "not found")
	failTool(t, cs, "delete_memory", map[string]any{"cube": "lily", "id": "000000000000000000000000"}, "not found")
	failTool(t, cs, "list_memories", map[string]any{"cube": "nosuch"}, "nosuch")
	failTool(t, cs, "list_memories", map[string]any{}, "no cube")
	failTool(t, cs, "add_memory", map[string]any{"cube": "lily", "text": "  "}, "empty text")
	failTool(t, cs, "add_memory", map[string]any{"cube": "bad/name", "text": "x"}, "not a cube name")
	failTool(t, cs, "search_memory", map[string]any{"cube": "lily", "query": ""}, "empty query")
	failTool(t, cs, "search_memory", map[string]any{"cube": "lily", "query": "dog", "k": 1000}, "outside")
	failTool(t, cs, "chat", map[string]any{"cube": "lily", "message": ""}, "empty message")
	failTool(t, cs, "chat", map[string]any{"cube": "lily", "message": "x", "num_predict": -3}, "num_predict")
	failTool(t, cs, "add_memory", map[string]any{"cube": "lily"}, "text")
	list = mcp.ListOut{}
	mustTool(t, cs, "list_memories", map[string]any{"cube": "lily"}, &list)
	if list.Total != 3 { // paint and the two recorded chat turns
		t.Fatalf("failed calls changed the cube: %+v", list)
	}

	// the X-Memosrt-Cube header is the default cube
	hc := mcpSession(t, e, "Authorization", "Bearer admin", CubeHeader, "lily")
	list = mcp.ListOut{}
	mustTool(t, hc, "list_memories", nil, &list)
	if list.Total != 3 || list.Memories[2].ID != paint.ID {
		t.Fatalf("list in the header's cube: %+v", list)
	}

	// /mcp is behind the bearer token
	c := sdk.NewClient(&sdk.Implementation{Name: "memosrt-test", Version: "0"}, nil)
	if s, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: e.url() + "/mcp", MaxRetries: -1}, nil); err == nil {
		s.Close()
		t.Fatal("connected to /mcp without the token")
	}
}

// A cube-scoped access key may use its own cube only: every tool naming
// another cube is a tool error saying so and leaves that cube as it was;
// without a cube argument the key's cube is used.
func TestMCPAccessKeys(t *testing.T) {
	e := newEnv(t, envConfig{nctx: 1024, opts: Options{Token: "admin"}, mo: memosrt.Options{NoScheduler: true}})
	admin := mcpSession(t, e, "Authorization", "Bearer admin")
	var a, b mcp.Memory
	mustTool(t, admin, "add_memory", map[string]any{"cube": "a", "text": "Ann has a red bike."}, &a)
	mustTool(t, admin, "add_memory", map[string]any{"cube": "b", "text": "Ben has a blue kite."}, &b)
	var k struct{ ID, Token string }
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cube": "a"}, &k, "Authorization", "Bearer admin"); code != http.StatusCreated || k.Token == "" {
		t.Fatalf("create key: %d", code)
	}
	stateOf := func(cube string) string {
		t.Helper()
		mems, err := e.os.Memories(context.Background(), cube)
		if err != nil {
			t.Fatal(err)
		}
		st, err := e.os.Tiers(context.Background(), cube, 0)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal([]any{mems, st.Memories})
		return string(j)
	}
	before := stateOf("b")

	key := mcpSession(t, e, "Authorization", "Bearer "+k.Token)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"add_memory", map[string]any{"text": "Ben lost his kite."}},
		{"search_memory", map[string]any{"query": "kite"}},
		{"list_memories", map[string]any{}},
		{"delete_memory", map[string]any{"id": b.ID}},
		{"get_profile", map[string]any{}},
		{"chat", map[string]any{"message": "Where is the kite?", "num_predict": 4}},
		{"feedback", map[string]any{"rating": 1}},
	} {
		t.Run(c.tool, func(t *testing.T) {
			c.args["cube"] = "b"
			failTool(t, key, c.tool, c.args, `access denied: key `+k.ID+` has no`)
			failTool(t, key, c.tool, c.args, `right on cube "b" (no right there)`)
			c.args["cube"] = "new"
			failTool(t, key, c.tool, c.args, `right on cube "new" (no right there)`)
		})
	}
	if after := stateOf("b"); after != before {
		t.Fatalf("cube b changed through cube a's key:\n%s\n%s", before, after)
	}
	if _, err := e.os.Cube(context.Background(), "new"); err == nil {
		t.Fatal("cube a's key created cube new")
	}

	// no cube argument: the key's cube
	var m mcp.Memory
	mustTool(t, key, "add_memory", map[string]any{"text": "Ann rides to school."}, &m)
	var list mcp.ListOut
	mustTool(t, key, "list_memories", nil, &list)
	if list.Total != 2 || list.Memories[0].ID != m.ID || list.Memories[1].ID != a.ID {
		t.Fatalf("list with the key: %+v", list)
	}
	var hits mcp.SearchOut
	mustTool(t, key, "search_memory", map[string]any{"query": "bike"}, &hits)
	if len(hits.Hits) == 0 || hits.Hits[0].ID != a.ID {
		t.Fatalf("search with the key: %+v", hits)
	}
	var prof mcp.ProfileOut
	if text := mustTool(t, key, "get_profile", map[string]any{"cube": "a"}, &prof); prof.Cube != "a" || !strings.Contains(text, "Ann has a red bike.") {
		t.Fatalf("profile with the key: %q", text)
	}
	var reply mcp.ChatOut
	if mustTool(t, key, "chat", map[string]any{"message": "Ann", "num_predict": 4}, &reply); reply.Reply == "" {
		t.Fatalf("chat with the key: %+v", reply)
	}
	mustTool(t, key, "delete_memory", map[string]any{"id": m.ID}, nil)
	failTool(t, key, "delete_memory", map[string]any{"id": m.ID}, "not found")

	// a key that may read cube a, not write it: it searches and chats
	// (recording nothing), every change is refused naming the right
	var ro struct{ ID, Token string }
	if code := do(t, "POST", e.url()+"/v1/keys", map[string]any{"cubes": []map[string]string{{"cube": "a", "right": "read"}}}, &ro,
		"Authorization", "Bearer admin"); code != http.StatusCreated {
		t.Fatalf("create a read key: %d", code)
	}
	reader := mcpSession(t, e, "Authorization", "Bearer "+ro.Token)
	memsOf := func(cube string) string { // the memories; heat counts reads too
		t.Helper()
		mems, err := e.os.Memories(context.Background(), cube)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(mems)
		return string(j)
	}
	before = memsOf("a")
	turns := len(turnsOf(t, e, "a", "Authorization", "Bearer admin"))
	mustTool(t, reader, "search_memory", map[string]any{"query": "bike"}, &hits)
	mustTool(t, reader, "list_memories", nil, &list)
	mustTool(t, reader, "get_profile", nil, &prof)
	if mustTool(t, reader, "chat", map[string]any{"message": "Ann", "num_predict": 4}, &reply); reply.Reply == "" {
		t.Fatalf("chat with the read key: %+v", reply)
	}
	denied := `accesskey: access denied: key ` + ro.ID + ` has no write right on cube "a" (only read)`
	failTool(t, reader, "add_memory", map[string]any{"text": "Ann sold her bike."}, denied)
	failTool(t, reader, "delete_memory", map[string]any{"id": a.ID}, denied)
	failTool(t, reader, "add_messages", map[string]any{"messages": []map[string]string{{"role": "user", "content": "I sold my bike."}}}, denied)
	if after := memsOf("a"); after != before {
		t.Fatalf("cube a changed through its read key:\n%s\n%s", before, after)
	}
	if n := len(turnsOf(t, e, "a", "Authorization", "Bearer admin")); n != turns {
		t.Fatalf("the read key's chat recorded turns: %d, was %d", n, turns)
	}

	// a header naming another cube is refused before MCP sees the request
	c := sdk.NewClient(&sdk.Implementation{Name: "memosrt-test", Version: "0"}, nil)
	tr := &sdk.StreamableClientTransport{Endpoint: e.url() + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: headerRT{[]string{"Authorization", "Bearer " + k.Token, CubeHeader, "b"}}}}
	if s, err := c.Connect(context.Background(), tr, nil); err == nil {
		s.Close()
		t.Fatal("cube a's key connected with X-Memosrt-Cube: b")
	}
}
