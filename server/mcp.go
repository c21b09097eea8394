package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// The MCP tool set (Model Context Protocol, github.com/modelcontextprotocol/go-sdk):
// written once here and served both over streamable HTTP at /mcp of a
// Server (behind its bearer token and access-key scope) and over stdio by
// `memosrt mcp`. Each tool is a translation to one memosrt.OS call; every
// failure (bad argument, unknown cube or memory, a cube the access key may
// not use, no model) is a tool error (CallToolResult.IsError with the
// message), never a protocol error.

// MCP tool limits and defaults.
const (
	mcpDefaultK          = 10   // search_memory hits when k is 0
	mcpMaxK              = 100  // search_memory k above this is an error
	mcpDefaultLimit      = 50   // list_memories memories when limit is 0
	mcpMaxLimit          = 1000 // list_memories limit above this is an error
	mcpProfileMemories   = 20   // get_profile: memories in the profile
	mcpDefaultNumPredict = 256  // chat: generated tokens when num_predict is 0
)

// MCPOptions configure the MCP server of NewMCP. Zero means the default given.
type MCPOptions struct {
	// Cube is the cube of tool calls that give no cube argument; "" means
	// such calls fail with a tool error naming the missing cube.
	Cube string
	// Version is reported as the server's version at initialize. Default
	// "0.0.0".
	Version string
	// Logger receives failed tool calls (debug) and recovered panics
	// (error); nil discards.
	Logger *slog.Logger
}

// NewMCP returns an MCP server whose tools work on o, which the caller
// keeps owning: add_memory, add_messages, search_memory, list_memories,
// delete_memory, get_profile and chat (see the tool descriptions). Run it on a transport
// (mcp.StdioTransport for `memosrt mcp`); a Server serves the same tools
// at /mcp. Safe for concurrent use: tool calls run concurrently and go
// through o's own locking.
func NewMCP(o *memosrt.OS, opts MCPOptions) *mcp.Server {
	if o == nil {
		panic("server: NewMCP: nil *memosrt.OS") // a programmer error
	}
	return newMCP(o, opts, nil)
}

// mcpCaller returns the access scope of one tool call: the cube an access
// key limits it to ("" for none) and the connection's default cube ("" for
// none).
type mcpCaller func(ctx context.Context, req *mcp.CallToolRequest) (scope, cube string, err error)

// mcpTools holds what every tool handler needs.
type mcpTools struct {
	os     *memosrt.OS
	opts   MCPOptions
	caller mcpCaller // nil: no scope, the default cube is opts.Cube
}

func newMCP(o *memosrt.OS, opts MCPOptions, caller mcpCaller) *mcp.Server {
	if opts.Version == "" {
		opts.Version = "0.0.0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t := &mcpTools{os: o, opts: opts, caller: caller}
	s := mcp.NewServer(&mcp.Implementation{Name: "memosrt", Title: "memosrt memory", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Long-term memory of a user, kept in a memory cube: store facts with add_memory, recall them with " +
			"search_memory or get_profile, and chat with a local model that sees them.",
		Logger: opts.Logger,
	})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true}
	addTool(t, s, &mcp.Tool{Name: "add_memory", Description: "Store a text memory in the cube (created if new); returns the stored memory."}, t.addMemory)
	addTool(t, s, &mcp.Tool{Name: "search_memory", Annotations: readOnly,
		Description: "Search the cube's memories (BM25 with stemming); returns the best hits with their ids and scores. Recorded chat turns are left out unless include_turns is set; then they come after every stored memory."}, t.searchMemory)
	addTool(t, s, &mcp.Tool{Name: "list_memories", Annotations: readOnly,
		Description: "List the cube's memories, newest first, and how many it holds."}, t.listMemories)
	addTool(t, s, &mcp.Tool{Name: "delete_memory", Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: true},
		Description: "Delete one memory of the cube by id."}, t.deleteMemory)
	addTool(t, s, &mcp.Tool{Name: "add_messages", Description: "Record a conversation (user and assistant messages) in the cube " +
		"(created if new) and queue a background job that extracts memories from it; returns the job and the recorded turns."}, t.addMessages)
	addTool(t, s, &mcp.Tool{Name: "get_profile", Annotations: readOnly,
		Description: "What the cube knows about its user: the long-term profile (facts and knowledge extracted from " +
			"conversations) and the most used memories first, as text and as lists."}, t.getProfile)
	addTool(t, s, &mcp.Tool{Name: "chat", Description: "Send one message to the local model with the cube's memories in its prompt; returns the reply."}, t.chat)
	return s
}

// addTool adds a typed tool whose handler gets the call's resolved scope
// and turns a panic into a tool error (the SDK runs handlers on its own
// goroutines, outside the HTTP handler's recovery).
func addTool[In, Out any](t *mcpTools, s *mcp.Server, tool *mcp.Tool, h func(context.Context, mcpCall, In) (*mcp.CallToolResult, Out, error)) {
	mcp.AddTool(s, tool, func(ctx context.Context, req *mcp.CallToolRequest, in In) (res *mcp.CallToolResult, out Out, err error) {
		defer func() {
			if v := recover(); v != nil {
				t.opts.Logger.Error("panic in an MCP tool", "tool", tool.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				res, err = nil, fmt.Errorf("server: internal error in tool %s (%v)", tool.Name, v)
			}
			if err != nil {
				t.opts.Logger.Debug("MCP tool failed", "tool", tool.Name, "err", err)
			}
		}()
		c := mcpCall{cube: t.opts.Cube}
		if t.caller != nil {
			if c.scope, c.cube, err = t.caller(ctx, req); err != nil {
				return nil, out, err
			}
		}
		return h(ctx, c, in)
	})
}

// mcpCall is the scope of one tool call.
type mcpCall struct {
	scope string // the only cube an access key may use; "" any
	cube  string // the default cube; "" none
}

// resolve returns the cube of a call given arg (the tool's cube argument):
// arg, else the call's default cube. It must be a valid name and, for an
// access key, the key's cube; exist says it must also exist.
func (t *mcpTools) resolve(ctx context.Context, c mcpCall, arg string, exist bool) (string, error) {
	cube := arg
	if cube == "" {
		cube = c.cube
	}
	switch {
	case cube == "":
		return "", wire.BadField("cube", "no cube: give the cube argument (no default cube on this connection)")
	case !textmem.ValidCube(cube):
		return "", wire.BadField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", cube)
	case c.scope != "" && cube != c.scope:
		return "", fmt.Errorf("%w: cube %q is not allowed (the key is for %q)", wire.ErrForbidden, cube, c.scope)
	}
	if exist {
		if _, err := t.os.Cube(ctx, cube); err != nil {
			return "", err
		}
	}
	return cube, nil
}

// mcpMemory is a memory as the MCP tools return it.
type mcpMemory struct {
	ID      string    `json:"id" jsonschema:"memory id: 24 hex digits, sorting in creation order"`
	Text    string    `json:"text"`
	Kind    string    `json:"kind,omitempty"`
	Tags    []string  `json:"tags,omitempty"`
	Created time.Time `json:"created" jsonschema:"when the memory was stored, RFC 3339 UTC"`
}

func toMCPMemory(m textmem.Memory) mcpMemory {
	return mcpMemory{ID: m.ID, Text: m.Text, Kind: m.Kind, Tags: m.Tags, Created: m.Created}
}

type mcpAddIn struct {
	Cube string   `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Text string   `json:"text" jsonschema:"the memory, one fact in plain text"`
	Tags []string `json:"tags,omitempty" jsonschema:"labels to filter by later"`
}

// addMemory stores in.Text (AddMemory creates the cube, as POST
// /v1/cubes/{cube}/memories does). Errors: empty text, text too large or
// not UTF-8, a bad or forbidden cube.
func (t *mcpTools) addMemory(ctx context.Context, c mcpCall, in mcpAddIn) (*mcp.CallToolResult, mcpMemory, error) {
	cube, err := t.resolve(ctx, c, in.Cube, false)
	if err != nil {
		return nil, mcpMemory{}, err
	}
	if strings.TrimSpace(in.Text) == "" {
		return nil, mcpMemory{}, wire.BadField("text", "empty text")
	}
	m, err := t.os.AddMemory(ctx, cube, textmem.Memory{Text: in.Text, Tags: in.Tags})
	if err != nil {
		return nil, mcpMemory{}, err
	}
	return nil, toMCPMemory(m), nil
}

type mcpSearchIn struct {
	Cube  string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Query string `json:"query" jsonschema:"what to look for, in words"`
	K     int    `json:"k,omitempty" jsonschema:"hits to return, 1..100 (default 10)"`
	// IncludeTurns as the memory API's search.
	IncludeTurns bool `json:"include_turns,omitempty" jsonschema:"also return recorded chat turns (kind turn: what was said, with the model's answers), after every stored memory"`
}

type mcpHit struct {
	ID    string  `json:"id"`
	Text  string  `json:"text"`
	Kind  string  `json:"kind,omitempty" jsonschema:"the memory's kind; turn for a recorded chat turn"`
	Score float64 `json:"score" jsonschema:"rank within its kind's tier, higher is better (BM25 scale)"`
}

type mcpSearchOut struct {
	Hits []mcpHit `json:"hits" jsonschema:"best first"`
}

// searchMemory runs OS.Search (which counts each hit towards its heat).
// Errors: empty query, k outside [0, 100], an unknown or forbidden cube.
func (t *mcpTools) searchMemory(ctx context.Context, c mcpCall, in mcpSearchIn) (*mcp.CallToolResult, mcpSearchOut, error) {
	out := mcpSearchOut{Hits: []mcpHit{}}
	cube, err := t.resolve(ctx, c, in.Cube, true)
	switch {
	case err != nil:
	case strings.TrimSpace(in.Query) == "":
		err = wire.BadField("query", "empty query")
	case in.K < 0 || in.K > mcpMaxK:
		err = wire.BadField("k", "%d is outside [0, %d]", in.K, mcpMaxK)
	}
	if err != nil {
		return nil, out, err
	}
	k := in.K
	if k == 0 {
		k = mcpDefaultK
	}
	hits, err := t.os.Search(ctx, cube, memosrt.SearchQuery(in.Query, k, in.IncludeTurns))
	if err != nil {
		return nil, out, err
	}
	for _, h := range hits {
		out.Hits = append(out.Hits, mcpHit{ID: h.Memory.ID, Text: h.Memory.Text, Kind: h.Memory.Kind, Score: h.Score})
	}
	return nil, out, nil
}

type mcpListIn struct {
	Cube  string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Limit int    `json:"limit,omitempty" jsonschema:"memories to return, 1..1000 (default 50)"`
}

type mcpListOut struct {
	Memories []mcpMemory `json:"memories" jsonschema:"newest first, at most limit"`
	Total    int         `json:"total" jsonschema:"memories the cube holds"`
}

// listMemories returns the newest limit memories of the cube. Errors:
// limit outside [0, 1000], an unknown or forbidden cube.
func (t *mcpTools) listMemories(ctx context.Context, c mcpCall, in mcpListIn) (*mcp.CallToolResult, mcpListOut, error) {
	out := mcpListOut{Memories: []mcpMemory{}}
	cube, err := t.resolve(ctx, c, in.Cube, true)
	if err == nil && (in.Limit < 0 || in.Limit > mcpMaxLimit) {
		err = wire.BadField("limit", "%d is outside [0, %d]", in.Limit, mcpMaxLimit)
	}
	if err != nil {
		return nil, out, err
	}
	limit := in.Limit
	if limit == 0 {
		limit = mcpDefaultLimit
	}
	mems, err := t.os.Memories(ctx, cube)
	if err != nil {
		return nil, out, err
	}
	out.Total = len(mems)
	for i := len(mems) - 1; i >= 0 && len(out.Memories) < limit; i-- {
		out.Memories = append(out.Memories, toMCPMemory(mems[i]))
	}
	return nil, out, nil
}

type mcpDeleteIn struct {
	Cube string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	ID   string `json:"id" jsonschema:"id of the memory to delete"`
}

type mcpDeleteOut struct {
	Deleted string `json:"deleted" jsonschema:"id of the deleted memory"`
}

// deleteMemory runs OS.DeleteMemory. Errors: an unknown memory id
// (textmem.ErrNotFound), an unknown or forbidden cube.
func (t *mcpTools) deleteMemory(ctx context.Context, c mcpCall, in mcpDeleteIn) (*mcp.CallToolResult, mcpDeleteOut, error) {
	cube, err := t.resolve(ctx, c, in.Cube, true)
	if err == nil && strings.TrimSpace(in.ID) == "" {
		err = wire.BadField("id", "empty id")
	}
	if err == nil {
		err = t.os.DeleteMemory(ctx, cube, in.ID)
	}
	if err != nil {
		return nil, mcpDeleteOut{}, err
	}
	return nil, mcpDeleteOut{Deleted: in.ID}, nil
}

type mcpProfileIn struct {
	Cube string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
}

type mcpProfileMemory struct {
	ID   string  `json:"id"`
	Text string  `json:"text"`
	Heat float64 `json:"heat" jsonschema:"how much the memory is used (MemoryOS heat), higher first"`
	Tier string  `json:"tier" jsonschema:"text, or activation when the memory is in the cube's KV pack"`
}

type mcpProfileOut struct {
	Cube     string             `json:"cube"`
	Profile  string             `json:"profile" jsonschema:"the profile and the memories as text, one line each"`
	Memories []mcpProfileMemory `json:"memories" jsonschema:"hottest first, then newest; at most 20"`
	Total    int                `json:"total" jsonschema:"memories the cube holds"`
	// the long-term profile (OS.Profile, convmem.Profile)
	Facts     []convmem.ProfileItem `json:"facts" jsonschema:"long-term profile: facts and preferences about the user, written by consolidated conversations"`
	Knowledge []convmem.ProfileItem `json:"knowledge" jsonschema:"long-term profile: knowledge the conversations taught"`
	Updated   time.Time             `json:"updated,omitzero" jsonschema:"when the long-term profile last changed, RFC 3339 UTC"`
}

// getProfile returns the cube's long-term profile (OS.Profile) and its
// memories hottest first (OS.Tiers; equal heat: newest first), at most
// mcpProfileMemories, as a text profile (the result's text content) and as
// lists. Errors: an unknown or forbidden cube.
func (t *mcpTools) getProfile(ctx context.Context, c mcpCall, in mcpProfileIn) (*mcp.CallToolResult, mcpProfileOut, error) {
	out := mcpProfileOut{Memories: []mcpProfileMemory{}, Facts: []convmem.ProfileItem{}, Knowledge: []convmem.ProfileItem{}}
	cube, err := t.resolve(ctx, c, in.Cube, true)
	if err != nil {
		return nil, out, err
	}
	p, err := t.os.Profile(ctx, cube)
	if err != nil {
		return nil, out, err
	}
	p = wire.Profile(p)
	out.Facts, out.Knowledge, out.Updated = p.Facts, p.Knowledge, p.Updated
	st, err := t.os.Tiers(ctx, cube, 1)
	if err != nil {
		return nil, out, err
	}
	// recorded chat turns are the conversation, not what is known of the
	// user: the profile lists the other memories
	all, err := t.os.Memories(ctx, cube)
	if err != nil {
		return nil, out, err
	}
	turn := map[string]bool{}
	for _, m := range all {
		if m.Kind == memosrt.KindTurn {
			turn[m.ID] = true
		}
	}
	mems := slices.DeleteFunc(st.Memories, func(m scheduler.MemoryTier) bool { return turn[m.ID] })
	// State sorts by heat alone (stably, in creation order); ids sort in
	// creation order, so the later id is the newer memory
	slices.SortStableFunc(mems, func(a, b scheduler.MemoryTier) int {
		if a.Heat != b.Heat {
			if a.Heat > b.Heat {
				return -1
			}
			return 1
		}
		return strings.Compare(b.ID, a.ID)
	})
	out.Cube, out.Total = cube, len(mems)
	var b strings.Builder
	switch {
	case len(mems) == 0:
		fmt.Fprintf(&b, "Cube %s holds no memories yet.", cube)
	case len(mems) <= mcpProfileMemories:
		fmt.Fprintf(&b, "What cube %s remembers about its user (%d memories, most used first):", cube, len(mems))
	default:
		fmt.Fprintf(&b, "What cube %s remembers about its user (%d most used of %d memories):", cube, mcpProfileMemories, len(mems))
	}
	for _, m := range mems[:min(len(mems), mcpProfileMemories)] {
		out.Memories = append(out.Memories, mcpProfileMemory{ID: m.ID, Text: m.Text, Heat: m.Heat, Tier: m.Tier})
		fmt.Fprintf(&b, "\n- %s", strings.Join(strings.Fields(m.Text), " "))
	}
	for _, l := range []struct {
		head  string
		items []convmem.ProfileItem
	}{{"Facts about the user", p.Facts}, {"Knowledge", p.Knowledge}} {
		if len(l.items) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s (long-term profile):", l.head)
		for _, it := range l.items {
			fmt.Fprintf(&b, "\n- %s", strings.Join(strings.Fields(it.Text), " "))
		}
	}
	out.Profile = b.String()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out.Profile}}}, out, nil
}

type mcpChatIn struct {
	Cube       string `json:"cube,omitempty" jsonschema:"memory cube whose memories the prompt carries (default: the connection's cube)"`
	Message    string `json:"message" jsonschema:"the user's message"`
	NumPredict int    `json:"num_predict,omitempty" jsonschema:"most tokens to generate (default 256; -1: until the context is full)"`
	Record     string `json:"record,omitempty" jsonschema:"what the turn leaves in the cube's memory: empty (default) the message and the reply, user the message alone, none nothing"`
}

type mcpChatOut struct {
	Reply        string `json:"reply"`
	DoneReason   string `json:"done_reason" jsonschema:"stop (end of generation) or length (num_predict or the context reached)"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens" jsonschema:"prompt tokens reused from a KV state instead of prefilled"`
	EvalTokens   int    `json:"eval_tokens" jsonschema:"generated tokens"`
}

// chat runs OS.Chat with one user turn, greedy decoding and at most
// NumPredict tokens (0: mcpDefaultNumPredict); the reply is the result's
// text content. Errors: empty message, an unknown or forbidden cube,
// memosrt.ErrNoModel (`memosrt mcp` without --model), memosrt.ErrBusy,
// num_predict below -2.
func (t *mcpTools) chat(ctx context.Context, c mcpCall, in mcpChatIn) (*mcp.CallToolResult, mcpChatOut, error) {
	cube, err := t.resolve(ctx, c, in.Cube, true)
	if err == nil && strings.TrimSpace(in.Message) == "" {
		err = wire.BadField("message", "empty message")
	}
	var rec memosrt.RecordMode
	if err == nil {
		rec, err = memosrt.ParseRecordMode("record", in.Record)
	}
	if err != nil {
		return nil, mcpChatOut{}, err
	}
	n := in.NumPredict
	if n == 0 {
		n = mcpDefaultNumPredict
	}
	req := mcpChatRequest(cube, in.Message, n)
	req.Record = rec
	res, err := t.os.Chat(ctx, req)
	if errors.Is(err, memosrt.ErrNoModel) {
		err = fmt.Errorf("%w: chat needs a model (memosrt mcp --model PATH)", err)
	}
	if err != nil {
		return nil, mcpChatOut{}, err
	}
	out := mcpChatOut{Reply: res.Text, DoneReason: res.DoneReason, PromptTokens: res.Usage.PromptTokens,
		CachedTokens: res.Usage.CachedTokens, EvalTokens: res.Usage.EvalTokens}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Text}}}, out, nil
}

// mcpChatRequest is the request the chat tool hands to OS.Chat: one user
// turn in cube, greedy, at most numPredict tokens.
func mcpChatRequest(cube, message string, numPredict int) memosrt.Request {
	return memosrt.Request{Cube: cube, Messages: []memosrt.Message{{Role: "user", Content: message}}, NumPredict: numPredict}
}

type mcpMessage struct {
	Role    string `json:"role" jsonschema:"user or assistant (system and tool messages are left out)"`
	Content string `json:"content"`
}

type mcpMessagesIn struct {
	Cube     string       `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Messages []mcpMessage `json:"messages" jsonschema:"the conversation, oldest first; each user message makes a turn with the assistant message after it"`
	Infer    *bool        `json:"infer,omitempty" jsonschema:"queue the extraction job (default true); false records the turns only"`
}

type mcpMessagesOut struct {
	Job   *convmem.Job   `json:"job,omitempty" jsonschema:"the extraction job, queued: it runs in the background (absent with infer false)"`
	Turns []convmem.Turn `json:"turns" jsonschema:"the recorded turns, each stored as a memory of kind turn"`
}

// addMessages runs OS.AddMessages (the cube created if new), as POST
// /v1/cubes/{cube}/messages does. Errors: no message with text, a bad
// role, a bad or forbidden cube.
func (t *mcpTools) addMessages(ctx context.Context, c mcpCall, in mcpMessagesIn) (*mcp.CallToolResult, mcpMessagesOut, error) {
	out := mcpMessagesOut{Turns: []convmem.Turn{}}
	cube, err := t.resolve(ctx, c, in.Cube, false)
	if err != nil {
		return nil, out, err
	}
	msgs := make([]memosrt.Message, len(in.Messages))
	for i, m := range in.Messages {
		msgs[i] = memosrt.Message{Role: m.Role, Content: m.Content}
	}
	noExtract := in.Infer != nil && !*in.Infer
	j, turns, err := t.os.AddMessages(ctx, cube, msgs, memosrt.MessagesOptions{NoExtract: noExtract})
	if err != nil {
		return nil, out, err
	}
	if !noExtract {
		out.Job = &j
	}
	if turns != nil {
		out.Turns = turns
	}
	return nil, out, nil
}

// mcpHandler serves the MCP tools over streamable HTTP (stateless: each
// POST is one exchange, JSON answers, no session to leak or to hold
// Shutdown). It sits behind wrap: the bearer token is checked per POST,
// and each tool call takes its scope from that POST's headers: an access
// key's cube (the only one it may use, and the default), else the
// X-Memosrt-Cube header as the default.
func (s *Server) mcpHandler() http.Handler {
	caller := func(ctx context.Context, req *mcp.CallToolRequest) (string, string, error) {
		var h http.Header
		if req.Extra != nil {
			h = req.Extra.Header
		}
		scope := ""
		if s.opts.Token != "" {
			// wrap let this POST in; its token says which cubes it may use
			sc, ok := s.authorized((&http.Request{Header: h}).WithContext(ctx))
			if !ok {
				return "", "", wire.ErrUnauthorized
			}
			scope = sc
		}
		if scope != "" {
			return scope, scope, nil
		}
		return "", h.Get(CubeHeader), nil
	}
	srv := newMCP(s.os, MCPOptions{Version: s.opts.Version, Logger: s.log}, caller)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, Logger: s.log, MaxRequestBodyBytes: s.opts.MaxBodyBytes,
		PropagateRequestCancellation: true,
	})
	// the SDK decodes with encoding/json, which turns bad text into
	// U+FFFD: a body with any is a 400 naming the field first
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			raw, err := io.ReadAll(r.Body)
			if err == nil {
				err = wire.CheckJSONText(raw)
			}
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		h.ServeHTTP(w, r)
	})
}
