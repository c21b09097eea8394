package mcp

import (
	"bytes"
	"cmp"
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

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// Tool limits and defaults.
const (
	defaultK          = 10   // search_memory hits when k is 0
	maxK              = 100  // search_memory k above this is an error
	defaultLimit      = 50   // list_memories memories when limit is 0
	maxLimit          = 1000 // list_memories limit above this is an error
	profileMemories   = 20   // get_profile: memories in the profile
	defaultNumPredict = 256  // chat: generated tokens when num_predict is 0
)

// Options configure the MCP server of New and NewHandler. Zero means the
// default given.
type Options struct {
	// Cube is the cube of tool calls that give no cube argument; "" means
	// such calls fail with a tool error naming the missing cube. NewHandler
	// takes each call's default cube from its Caller instead.
	Cube string
	// Version is reported as the server's version at initialize. Default
	// "0.0.0".
	Version string
	// Logger receives failed tool calls (debug) and recovered panics
	// (error), and NewHandler's failed requests; nil discards.
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.Version == "" {
		o.Version = "0.0.0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// New returns an MCP server whose tools work on o, which the caller keeps
// owning: add_memory, add_messages, search_memory, list_memories,
// delete_memory, get_profile, chat and feedback (see the tool
// descriptions). Run it
// on a transport (sdk.StdioTransport for `memosrt mcp`); NewHandler serves
// the same tools over HTTP. Safe for concurrent use: tool calls run
// concurrently and go through o's own locking. A nil o panics (a
// programmer error).
func New(o *memosrt.OS, opts Options) *sdk.Server {
	if o == nil {
		panic("mcp: New: nil *memosrt.OS") // a programmer error
	}
	return newServer(o, opts, nil)
}

// Caller returns the access of one tool call from h, the headers of the
// HTTP request that carried it (nil when the transport has none): its
// access key (nil: every cube) and the call's cubes (none: no default):
// the first is the default cube, the others the cubes a chat or
// search_memory call naming neither cube nor cubes reads too (as a cubes
// argument would). An error fails the call with a tool error.
type Caller func(ctx context.Context, h http.Header) (key *memosrt.AccessKey, cubes []string, err error)

// tools holds what every tool handler needs.
type tools struct {
	os     *memosrt.OS
	opts   Options
	caller Caller // nil: every cube, the default cube is opts.Cube
}

// newServer returns the MCP server of New and NewHandler.
func newServer(o *memosrt.OS, opts Options, caller Caller) *sdk.Server {
	opts.ensureDefaults()
	t := &tools{os: o, opts: opts, caller: caller}
	s := sdk.NewServer(&sdk.Implementation{Name: "memosrt", Title: "memosrt memory", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: "Long-term memory of a user, kept in a memory cube: store facts with add_memory, recall them with " +
			"search_memory or get_profile, and chat with a local model that sees them.",
		Logger: opts.Logger,
	})
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true}
	addTool(t, s, &sdk.Tool{Name: "add_memory", Description: "Store a text memory in the cube (created if new); returns the stored memory."}, t.addMemory)
	addTool(t, s, &sdk.Tool{Name: "search_memory", Annotations: readOnly,
		Description: "Search the cube's memories (BM25 with stemming); returns the best hits with their ids and scores. Recorded chat turns are left out unless include_turns is set; then they come after every stored memory."}, t.searchMemory)
	addTool(t, s, &sdk.Tool{Name: "list_memories", Annotations: readOnly,
		Description: "List the cube's memories, newest first, and how many it holds."}, t.listMemories)
	addTool(t, s, &sdk.Tool{Name: "delete_memory", Annotations: &sdk.ToolAnnotations{DestructiveHint: new(true), IdempotentHint: true},
		Description: "Delete one memory of the cube by id."}, t.deleteMemory)
	addTool(t, s, &sdk.Tool{Name: "add_messages", Description: "Record a conversation (user and assistant messages) in the cube " +
		"(created if new) and queue a background job that extracts memories from it; returns the job and the recorded turns."}, t.addMessages)
	addTool(t, s, &sdk.Tool{Name: "get_profile", Annotations: readOnly,
		Description: "What the cube knows about its user: the long-term profile (facts, preferences and knowledge extracted from " +
			"conversations; every memory of kind preference among the preferences) and the most used memories first, as text and as lists."}, t.getProfile)
	addTool(t, s, &sdk.Tool{Name: "feedback", Description: "Give feedback on an answer of chat (its id, or the cube's latest): " +
		"a correction in plain words (\"no, my dog is Rex\") replaces the memory the answer used that it contradicts, " +
		"keeping the old text as the previous version (undo: the job id), or is stored as a new memory; " +
		"a rating (-1 or 1) or stars (1 to 5) moves how much the answer's memories are used."}, t.feedback)
	addTool(t, s, &sdk.Tool{Name: "chat", Description: "Send one message to the local model with the cube's memories in its prompt; returns the reply."}, t.chat)
	return s
}

// addTool adds a typed tool whose handler gets the call's access (its key
// in ctx, its default cube) and turns a panic into a tool error (the SDK runs handlers on its own
// goroutines, outside the HTTP handler's recovery).
func addTool[In, Out any](t *tools, s *sdk.Server, tool *sdk.Tool, h func(context.Context, call, In) (*sdk.CallToolResult, Out, error)) {
	sdk.AddTool(s, tool, func(ctx context.Context, req *sdk.CallToolRequest, in In) (res *sdk.CallToolResult, out Out, err error) {
		defer func() {
			if v := recover(); v != nil {
				t.opts.Logger.Error("panic in an MCP tool", "tool", tool.Name, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				res, err = nil, fmt.Errorf("server: internal error in tool %s (%v)", tool.Name, v)
			}
			if err != nil {
				t.opts.Logger.Debug("MCP tool failed", "tool", tool.Name, "err", err)
			}
		}()
		c := call{cube: t.opts.Cube}
		if t.caller != nil {
			var hdr http.Header
			if req.Extra != nil {
				hdr = req.Extra.Header
			}
			var k *memosrt.AccessKey
			var cubes []string
			if k, cubes, err = t.caller(ctx, hdr); err != nil {
				return nil, out, err
			}
			c.cube = ""
			if len(cubes) > 0 {
				c.cube, c.reads = cubes[0], cubes[1:]
			}
			if k != nil {
				ctx = wire.ContextWithKey(ctx, *k)
			}
		}
		return h(ctx, c, in)
	})
}

// call is what a tool call was made with; its access key, if any, is in
// its ctx (wire.KeyOf).
type call struct {
	cube  string   // the default cube; "" none
	reads []string // the cubes read with cube by default (Caller)
}

// defaultCubes returns the cubes of a chat or search_memory call naming
// neither cube nor cubes: the default cube and the connection's read
// cubes; nil when the connection names no read cube.
func (c call) defaultCubes(arg string, cubes []string) []string {
	if arg != "" || len(cubes) > 0 || len(c.reads) == 0 {
		return cubes
	}
	return append([]string{c.cube}, c.reads...)
}

// resolve returns the cube of a call given arg (the tool's cube argument):
// arg, else the call's default cube. It must be a valid name the caller
// has the right need on (wire.Allow: an error wrapping
// memosrt.ErrKeyDenied naming the cube and the right); exist says it must
// also exist.
func (t *tools) resolve(ctx context.Context, c call, arg string, need memosrt.KeyRight, exist bool) (string, error) {
	cube := arg
	if cube == "" {
		cube = c.cube
	}
	switch {
	case cube == "":
		return "", wire.BadField("cube", "no cube: give the cube argument (no default cube on this connection)")
	case !textmem.ValidCube(cube):
		return "", wire.BadField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", cube)
	}
	if err := wire.Allow(ctx, t.os, cube, need); err != nil {
		return "", err
	}
	if exist {
		if _, err := t.os.Cube(ctx, cube); err != nil {
			return "", err
		}
	}
	return cube, nil
}

// Memory is a memory as the MCP tools return it (add_memory's structured
// result, an element of ListOut.Memories).
type Memory struct {
	ID      string    `json:"id" jsonschema:"memory id: 24 hex digits, sorting in creation order"`
	Text    string    `json:"text"`
	Kind    string    `json:"kind,omitempty"`
	Tags    []string  `json:"tags,omitempty"`
	Created time.Time `json:"created" jsonschema:"when the memory was stored, RFC 3339 UTC"`
}

func toMemory(m textmem.Memory) Memory {
	return Memory{ID: m.ID, Text: m.Text, Kind: m.Kind, Tags: m.Tags, Created: m.Created}
}

type addIn struct {
	Cube string   `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Text string   `json:"text" jsonschema:"the memory, one fact in plain text"`
	Tags []string `json:"tags,omitempty" jsonschema:"labels to filter by later"`
}

// addMemory stores in.Text (AddMemory creates the cube, as POST
// /v1/cubes/{cube}/memories does). Errors: empty text, text too large or
// not UTF-8, a bad or forbidden cube.
func (t *tools) addMemory(ctx context.Context, c call, in addIn) (*sdk.CallToolResult, Memory, error) {
	cube, err := t.resolve(ctx, c, in.Cube, memosrt.KeyWrite, false)
	if err != nil {
		return nil, Memory{}, err
	}
	if strings.TrimSpace(in.Text) == "" {
		return nil, Memory{}, wire.BadField("text", "empty text")
	}
	m, err := t.os.AddMemory(ctx, cube, textmem.Memory{Text: in.Text, Tags: in.Tags})
	if err != nil {
		return nil, Memory{}, err
	}
	return nil, toMemory(m), nil
}

type searchIn struct {
	Cube string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	// Cubes searches several cubes at once, hits merged.
	Cubes []string `json:"cubes,omitempty" jsonschema:"search these cubes instead of one (at most 8): hits merged by score, each memory once, with its cube"`
	Query string   `json:"query" jsonschema:"what to look for, in words"`
	K     int      `json:"k,omitempty" jsonschema:"hits to return, 1..100 (default 10)"`
	// IncludeTurns as the memory API's search.
	IncludeTurns bool `json:"include_turns,omitempty" jsonschema:"also return recorded chat turns (kind turn: what was said, with the model's answers), after every stored memory"`
}

// Hit is one memory search_memory found (an element of SearchOut.Hits).
type Hit struct {
	ID    string  `json:"id"`
	Cube  string  `json:"cube" jsonschema:"the cube the memory lives in"`
	Text  string  `json:"text"`
	Kind  string  `json:"kind,omitempty" jsonschema:"the memory's kind; turn for a recorded chat turn"`
	Score float64 `json:"score" jsonschema:"rank within its kind's tier, higher is better (BM25 scale)"`
}

// SearchOut is search_memory's structured result.
type SearchOut struct {
	Hits []Hit `json:"hits" jsonschema:"best first"`
}

// searchMemory runs OS.Search (which counts each hit towards its heat).
// Errors: empty query, k outside [0, 100], an unknown or forbidden cube.
func (t *tools) searchMemory(ctx context.Context, c call, in searchIn) (*sdk.CallToolResult, SearchOut, error) {
	out := SearchOut{Hits: []Hit{}}
	var err error
	if i := slices.Index(in.Cubes, ""); i >= 0 {
		return nil, out, wire.BadField("cubes", "cube %d is empty", i+1)
	}
	in.Cubes = wire.Distinct(c.defaultCubes(in.Cube, in.Cubes))
	cubes := in.Cubes
	if len(cubes) == 0 {
		var cube string
		cube, err = t.resolve(ctx, c, in.Cube, memosrt.KeyRead, true)
		cubes = []string{cube}
	} else if len(cubes) > memosrt.MaxCubes {
		err = wire.BadField("cubes", "%d cubes, at most %d", len(cubes), memosrt.MaxCubes)
	}
	for i := 0; err == nil && len(in.Cubes) > 0 && i < len(cubes); i++ {
		_, err = t.resolve(ctx, c, cubes[i], memosrt.KeyRead, true)
	}
	switch {
	case err != nil:
	case strings.TrimSpace(in.Query) == "":
		err = wire.BadField("query", "empty query")
	case in.K < 0 || in.K > maxK:
		err = wire.BadField("k", "%d is outside [0, %d]", in.K, maxK)
	}
	if err != nil {
		return nil, out, err
	}
	k := in.K
	if k == 0 {
		k = defaultK
	}
	var hits []textmem.Hit
	for _, cube := range cubes {
		hs, err := t.os.Search(ctx, cube, memosrt.SearchQuery(in.Query, k, in.IncludeTurns))
		if err != nil {
			return nil, out, err
		}
		for _, h := range hs {
			if h.Memory.Cube == "" {
				h.Memory.Cube = cube
			}
			if !slices.ContainsFunc(hits, func(x textmem.Hit) bool { return x.Memory.ID == h.Memory.ID }) {
				hits = append(hits, h)
			}
		}
	}
	if len(cubes) > 1 {
		// one ranking: turns after the other memories, then by score
		// (BM25 of each cube's own statistics), the cubes' order on ties
		slices.SortStableFunc(hits, func(a, b textmem.Hit) int {
			if ta, tb := a.Memory.Kind == memosrt.KindTurn, b.Memory.Kind == memosrt.KindTurn; ta != tb {
				if ta {
					return 1
				}
				return -1
			}
			return cmp.Compare(b.Score, a.Score)
		})
		hits = hits[:min(len(hits), k)]
	}
	for _, h := range hits {
		out.Hits = append(out.Hits, Hit{ID: h.Memory.ID, Cube: h.Memory.Cube, Text: h.Memory.Text, Kind: h.Memory.Kind, Score: h.Score})
	}
	return nil, out, nil
}

type listIn struct {
	Cube  string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Limit int    `json:"limit,omitempty" jsonschema:"memories to return, 1..1000 (default 50)"`
}

// ListOut is list_memories' structured result.
type ListOut struct {
	Memories []Memory `json:"memories" jsonschema:"newest first, at most limit"`
	Total    int      `json:"total" jsonschema:"memories the cube holds"`
}

// listMemories returns the newest limit memories of the cube. Errors:
// limit outside [0, 1000], an unknown or forbidden cube.
func (t *tools) listMemories(ctx context.Context, c call, in listIn) (*sdk.CallToolResult, ListOut, error) {
	out := ListOut{Memories: []Memory{}}
	cube, err := t.resolve(ctx, c, in.Cube, memosrt.KeyRead, true)
	if err == nil && (in.Limit < 0 || in.Limit > maxLimit) {
		err = wire.BadField("limit", "%d is outside [0, %d]", in.Limit, maxLimit)
	}
	if err != nil {
		return nil, out, err
	}
	limit := in.Limit
	if limit == 0 {
		limit = defaultLimit
	}
	mems, err := t.os.Memories(ctx, cube)
	if err != nil {
		return nil, out, err
	}
	out.Total = len(mems)
	for i := len(mems) - 1; i >= 0 && len(out.Memories) < limit; i-- {
		out.Memories = append(out.Memories, toMemory(mems[i]))
	}
	return nil, out, nil
}

type deleteIn struct {
	Cube string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	ID   string `json:"id" jsonschema:"id of the memory to delete"`
}

// DeleteOut is delete_memory's structured result.
type DeleteOut struct {
	Deleted string `json:"deleted" jsonschema:"id of the deleted memory"`
}

// deleteMemory runs OS.DeleteMemory. Errors: an unknown memory id
// (textmem.ErrNotFound), an unknown or forbidden cube.
func (t *tools) deleteMemory(ctx context.Context, c call, in deleteIn) (*sdk.CallToolResult, DeleteOut, error) {
	cube, err := t.resolve(ctx, c, in.Cube, memosrt.KeyWrite, true)
	if err == nil && strings.TrimSpace(in.ID) == "" {
		err = wire.BadField("id", "empty id")
	}
	if err == nil {
		err = t.os.DeleteMemory(ctx, cube, in.ID)
	}
	if err != nil {
		return nil, DeleteOut{}, err
	}
	return nil, DeleteOut{Deleted: in.ID}, nil
}

type profileIn struct {
	Cube string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
}

// ProfileMemory is one memory of get_profile's list (ProfileOut.Memories).
type ProfileMemory struct {
	ID   string  `json:"id"`
	Text string  `json:"text"`
	Heat float64 `json:"heat" jsonschema:"how much the memory is used (MemoryOS heat), higher first"`
	Tier string  `json:"tier" jsonschema:"text, or activation when the memory is in the cube's KV pack"`
}

// ProfileOut is get_profile's structured result; Profile is also its text
// content.
type ProfileOut struct {
	Cube     string          `json:"cube"`
	Profile  string          `json:"profile" jsonschema:"the profile and the memories as text, one line each"`
	Memories []ProfileMemory `json:"memories" jsonschema:"hottest first, then newest; at most 20"`
	Total    int             `json:"total" jsonschema:"memories the cube holds"`
	// the long-term profile (OS.Profile, convmem.Profile)
	Facts       []convmem.ProfileItem `json:"facts" jsonschema:"long-term profile: facts about the user, written by consolidated conversations"`
	Preferences []convmem.ProfileItem `json:"preferences" jsonschema:"the user's preferences: the long-term profile's, then every other memory of kind preference"`
	Knowledge   []convmem.ProfileItem `json:"knowledge" jsonschema:"long-term profile: knowledge the conversations taught"`
	Updated     time.Time             `json:"updated,omitzero" jsonschema:"when the long-term profile last changed, RFC 3339 UTC"`
}

// getProfile returns the cube's long-term profile (OS.Profile) and its
// memories hottest first (OS.Tiers; equal heat: newest first), at most
// profileMemories, as a text profile (the result's text content) and as
// lists. Errors: an unknown or forbidden cube.
func (t *tools) getProfile(ctx context.Context, c call, in profileIn) (*sdk.CallToolResult, ProfileOut, error) {
	out := ProfileOut{Memories: []ProfileMemory{}, Facts: []convmem.ProfileItem{}, Preferences: []convmem.ProfileItem{}, Knowledge: []convmem.ProfileItem{}}
	cube, err := t.resolve(ctx, c, in.Cube, memosrt.KeyRead, true)
	if err != nil {
		return nil, out, err
	}
	p, err := t.os.Profile(ctx, cube)
	if err != nil {
		return nil, out, err
	}
	p = wire.Profile(p)
	out.Facts, out.Preferences, out.Knowledge, out.Updated = p.Facts, p.Preferences, p.Knowledge, p.Updated
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
	case len(mems) <= profileMemories:
		fmt.Fprintf(&b, "What cube %s remembers about its user (%d memories, most used first):", cube, len(mems))
	default:
		fmt.Fprintf(&b, "What cube %s remembers about its user (%d most used of %d memories):", cube, profileMemories, len(mems))
	}
	for _, m := range mems[:min(len(mems), profileMemories)] {
		out.Memories = append(out.Memories, ProfileMemory{ID: m.ID, Text: m.Text, Heat: m.Heat, Tier: m.Tier})
		fmt.Fprintf(&b, "\n- %s", strings.Join(strings.Fields(m.Text), " "))
	}
	for _, l := range []struct {
		head  string
		items []convmem.ProfileItem
	}{{"Facts about the user", p.Facts}, {"The user's preferences", p.Preferences}, {"Knowledge", p.Knowledge}} {
		if len(l.items) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s (long-term profile):", l.head)
		for _, it := range l.items {
			fmt.Fprintf(&b, "\n- %s", strings.Join(strings.Fields(it.Text), " "))
		}
	}
	out.Profile = b.String()
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out.Profile}}}, out, nil
}

type chatIn struct {
	Cube string `json:"cube,omitempty" jsonschema:"memory cube whose memories the prompt carries (default: the connection's cube)"`
	// Cubes names several cubes, as the generate APIs' cubes.
	Cubes      []string `json:"cubes,omitempty" jsonschema:"several cubes: the first is written to (the cube, which may be left out), the others only read (shared, assistant cubes); at most 8"`
	Message    string   `json:"message" jsonschema:"the user's message"`
	NumPredict int      `json:"num_predict,omitempty" jsonschema:"most tokens to generate (default 256; -1: until the context is full)"`
	Record     string   `json:"record,omitempty" jsonschema:"what the turn leaves in the cube's memory: empty (default) the message and the reply, user the message alone, none nothing"`
}

// ChatOut is chat's structured result; Reply is also its text content.
type ChatOut struct {
	ID           string `json:"id" jsonschema:"the reply's response id: feedback names it"`
	Reply        string `json:"reply"`
	DoneReason   string `json:"done_reason" jsonschema:"stop (end of generation) or length (num_predict or the context reached)"`
	PromptTokens int    `json:"prompt_tokens"`
	CachedTokens int    `json:"cached_tokens" jsonschema:"prompt tokens reused from a KV state instead of prefilled"`
	EvalTokens   int    `json:"eval_tokens" jsonschema:"generated tokens"`
	// CubeMemories is memosrt.Response.CubeMemories.
	CubeMemories map[string]int `json:"cube_memories,omitempty" jsonschema:"the prompt's memories counted by the cube each lives in"`
}

// chat runs OS.Chat with one user turn, greedy decoding and at most
// NumPredict tokens (0: defaultNumPredict); the reply is the result's
// text content. Errors: empty message, an unknown or forbidden cube,
// memosrt.ErrNoModel (`memosrt mcp` without --model), memosrt.ErrBusy,
// num_predict below -2.
func (t *tools) chat(ctx context.Context, c call, in chatIn) (*sdk.CallToolResult, ChatOut, error) {
	cube, reads, err := t.resolveCubes(ctx, c, in.Cube, c.defaultCubes(in.Cube, in.Cubes))
	if err == nil && strings.TrimSpace(in.Message) == "" {
		err = wire.BadField("message", "empty message")
	}
	var rec memosrt.RecordMode
	if err == nil {
		rec, err = memosrt.ParseRecordMode("record", in.Record)
	}
	if err != nil {
		return nil, ChatOut{}, err
	}
	n := in.NumPredict
	if n == 0 {
		n = defaultNumPredict
	}
	req := ChatRequest(cube, in.Message, n)
	req.Record, req.ReadCubes = rec, reads
	for _, r := range reads {
		req.NoAssistantWrite = req.NoAssistantWrite || wire.ReadOnly(ctx, r)
	}
	if wire.ReadOnly(ctx, cube) {
		// a key that may read the cube, not write it: the chat leaves the
		// cube as it was (no turn recorded, no conversation pack)
		req.Record, req.NoPersist = memosrt.RecordNone, true
	}
	res, err := t.os.Chat(ctx, req)
	if errors.Is(err, memosrt.ErrNoModel) {
		err = fmt.Errorf("%w: chat needs a model (memosrt mcp --model PATH)", err)
	}
	if err != nil {
		return nil, ChatOut{}, err
	}
	out := ChatOut{ID: res.ID, Reply: res.Text, DoneReason: res.DoneReason, PromptTokens: res.Usage.PromptTokens,
		CachedTokens: res.Usage.CachedTokens, EvalTokens: res.Usage.EvalTokens, CubeMemories: res.CubeMemories}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.Text}}}, out, nil
}

// resolveCubes returns the cubes of a chat call: with cubes, the first
// (which arg, when given, must be) to write and the rest to read, each a
// valid name of an existing cube, at most memosrt.MaxCubes; the caller
// needs write on the first and read on the others. Without cubes, resolve
// of arg with read (the single-cube chat).
func (t *tools) resolveCubes(ctx context.Context, c call, arg string, cubes []string) (string, []string, error) {
	if i := slices.Index(cubes, ""); i >= 0 {
		return "", nil, wire.BadField("cubes", "cube %d is empty", i+1)
	}
	if len(cubes) <= 1 {
		if len(cubes) == 1 {
			if arg != "" && arg != cubes[0] {
				return "", nil, wire.BadField("cubes", "the first cube is %q, but cube names %q", cubes[0], arg)
			}
			arg = cubes[0]
		}
		cube, err := t.resolve(ctx, c, arg, memosrt.KeyRead, true)
		return cube, nil, err
	}
	if arg != "" && arg != cubes[0] {
		return "", nil, wire.BadField("cubes", "the first cube is %q, but cube names %q", cubes[0], arg)
	}
	cubes = wire.Distinct(cubes)
	if len(cubes) > memosrt.MaxCubes {
		return "", nil, wire.BadField("cubes", "%d cubes, at most %d", len(cubes), memosrt.MaxCubes)
	}
	for i, name := range cubes {
		need := memosrt.KeyRead
		if i == 0 {
			need = memosrt.KeyWrite
		}
		if _, err := t.resolve(ctx, c, name, need, true); err != nil {
			return "", nil, err
		}
	}
	return cubes[0], cubes[1:], nil
}

// ChatRequest is the request the chat tool hands to OS.Chat: one user
// turn in cube, greedy, at most numPredict tokens.
func ChatRequest(cube, message string, numPredict int) memosrt.Request {
	return memosrt.Request{Cube: cube, Messages: []memosrt.Message{{Role: "user", Content: message}}, NumPredict: numPredict}
}

type messageIn struct {
	Role    string `json:"role" jsonschema:"user or assistant (system and tool messages are left out)"`
	Content string `json:"content"`
}

type messagesIn struct {
	Cube     string      `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	Messages []messageIn `json:"messages" jsonschema:"the conversation, oldest first; each user message makes a turn with the assistant message after it"`
	Infer    *bool       `json:"infer,omitempty" jsonschema:"queue the extraction job (default true); false records the turns only"`
	// AssistantCube is memosrt.MessagesOptions.AssistantCube.
	AssistantCube string `json:"assistant_cube,omitempty" jsonschema:"an assistant's cube: the procedures extracted go there, the rest to the cube (write on it needed)"`
}

// MessagesOut is add_messages' structured result.
type MessagesOut struct {
	Job   *convmem.Job   `json:"job,omitempty" jsonschema:"the extraction job, queued: it runs in the background (absent with infer false)"`
	Turns []convmem.Turn `json:"turns" jsonschema:"the recorded turns, each stored as a memory of kind turn"`
}

// addMessages runs OS.AddMessages (the cube created if new), as POST
// /v1/cubes/{cube}/messages does. Errors: no message with text, a bad
// role, a bad or forbidden cube.
func (t *tools) addMessages(ctx context.Context, c call, in messagesIn) (*sdk.CallToolResult, MessagesOut, error) {
	out := MessagesOut{Turns: []convmem.Turn{}}
	cube, err := t.resolve(ctx, c, in.Cube, memosrt.KeyWrite, false)
	if err == nil && in.AssistantCube != "" {
		_, err = t.resolve(ctx, c, in.AssistantCube, memosrt.KeyWrite, true)
	}
	if err != nil {
		return nil, out, err
	}
	msgs := make([]memosrt.Message, len(in.Messages))
	for i, m := range in.Messages {
		msgs[i] = memosrt.Message{Role: m.Role, Content: m.Content}
	}
	noExtract := in.Infer != nil && !*in.Infer
	j, turns, err := t.os.AddMessages(ctx, cube, msgs, memosrt.MessagesOptions{NoExtract: noExtract, AssistantCube: in.AssistantCube})
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

// NewHandler returns an http.Handler serving the tools of New on o over
// streamable HTTP (stateless: each POST is one exchange, JSON answers, no
// session to leak or to hold a server's shutdown), each call's access
// from caller, on its POST's headers. A POST body is at most maxBodyBytes
// bytes; one holding text that is not valid UTF-8 is answered 400 naming
// the field (wire.WriteError), before the SDK would decode it.
// Authentication is the enclosing handler's: caller reads the headers of
// a POST already let in. Safe for concurrent use.
func NewHandler(o *memosrt.OS, opts Options, maxBodyBytes int64, caller Caller) http.Handler {
	opts.ensureDefaults()
	srv := newServer(o, opts, caller)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		Stateless: true, JSONResponse: true, Logger: opts.Logger, MaxRequestBodyBytes: maxBodyBytes,
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
				wire.WriteError(opts.Logger, w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		h.ServeHTTP(w, r)
	})
}

type feedbackIn struct {
	Cube       string `json:"cube,omitempty" jsonschema:"memory cube (default: the connection's cube)"`
	ResponseID string `json:"response_id,omitempty" jsonschema:"id of the answer (chat's id); empty: the cube's latest answer"`
	Correction string `json:"correction,omitempty" jsonschema:"what is true instead, in plain words; a leading no or actually is dropped"`
	Rating     *int   `json:"rating,omitempty" jsonschema:"-1 a bad answer, 1 a good one"`
	Stars      *int   `json:"stars,omitempty" jsonschema:"1 to 5 instead of rating: 1-2 bad, 3 neutral, 4-5 good"`
}

// feedback runs OS.Feedback; its result's text content is its Note.
// Errors: feedback with neither correction nor rating, a rating or stars
// out of range (0 given included, as on the REST route: memosrt.Feedback's
// 0 means none), an unknown response, an unknown or forbidden cube (it
// needs the write right).
func (t *tools) feedback(ctx context.Context, c call, in feedbackIn) (*sdk.CallToolResult, memosrt.FeedbackResult, error) {
	cube, err := t.resolve(ctx, c, in.Cube, memosrt.KeyWrite, true)
	if err != nil {
		return nil, memosrt.FeedbackResult{}, err
	}
	f, err := wire.Feedback(memosrt.Feedback{ResponseID: in.ResponseID, Correction: in.Correction}, in.Rating, in.Stars)
	if err != nil {
		return nil, memosrt.FeedbackResult{}, err
	}
	res, err := t.os.Feedback(ctx, cube, f)
	if err != nil {
		return nil, memosrt.FeedbackResult{}, err
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.Note}}}, res, nil
}
