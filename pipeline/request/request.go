package request

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
	"github.com/memosrt/memosrt/toolcall"
)

// Message is one chat turn: Role is "system", "user", "assistant" or
// "tool".
type Message = layout.Message

// Sampling are the per-request sampler settings (llama.cpp's sampler
// chain, as common_sampler orders it); the zero value is greedy decoding.
// RepeatLastN -1 means the request's whole context (Ollama's -1: num_ctx);
// more than the context is cut to it (the window is allocated up front);
// below -1 is a *FieldError.
type Sampling = llama.SamplerParams

// Request is one generation. Chat takes Messages; Generate takes Prompt
// (with System, Raw and Context as Ollama's /api/generate has them).
type Request struct {
	// ID is the id the Response carries (Response.ID): "" gets a new one
	// (NewResponseID); a server that sends the id before the answer (an
	// OpenAI stream's chunks) makes one first. Else "resp_" and at most
	// 64 bytes of letters, digits, '_' and '-', or a *FieldError.
	ID string
	// Model names the model to run (ModelSpec.Name or the primary's name);
	// "" is the primary. A model not loaded is loaded first.
	Model string
	// KeepAlive is how long the model stays loaded after this request
	// (Ollama's keep_alive): negative forever, 0 unloaded at its end (after
	// saving the conversation state); nil: Options.KeepAlive.
	KeepAlive *time.Duration
	// Cube whose memories the prompt carries and whose KV state may be
	// reused; "" is plain inference. It is the cube the turn writes to
	// (recorded turns, extraction, the conversation pack).
	Cube string
	// ReadCubes are further cubes the prompt reads, in the order named
	// (a request naming several cubes: Cube is the first): their packs
	// come first in the prompt, retrieval searches them with Cube, and
	// their memories' heat is credited to them; nothing is written to
	// them. At most MaxCubes cubes in all; names repeated (or Cube's) are
	// kept once. Requires Cube.
	ReadCubes []string
	// NoAssistantWrite keeps the turn's extraction from writing to an
	// assistant's cube among ReadCubes (textmem.Cube.Assistant): the
	// caller may read that cube, not write it. Everything extracted then
	// goes to Cube.
	NoAssistantWrite bool
	// Messages is the conversation (Chat).
	Messages []Message
	// Prompt is the completion prompt (Generate).
	Prompt string
	// System is a completion's system text (Generate), a system turn
	// after the pack.
	System string
	// Raw sends Prompt as is: no template, no memories (Generate).
	Raw bool
	// Context holds tokens of a previous exchange (Ollama's /api/generate
	// "context"); the rendered prompt's tokens follow them, no memories.
	Context []int32
	// Sampling chooses each token. Grammar in it constrains the output
	// (GBNF, see package runtime/grammar).
	Sampling Sampling
	// Format is the structured-output format as Ollama's API takes it
	// ("json" or a JSON schema), forwarded by the upstream backend; the
	// llama backend enforces Sampling.Grammar.
	Format json.RawMessage
	// NumPredict caps generated tokens. 0 means Options.DefaultNumPredict
	// (none set: until the context is full); -1 (no cap) and -2 (fill the
	// context), as Ollama's num_predict, mean until the context is full
	// whatever the default; below -2 is a *FieldError.
	NumPredict int
	// NumCtx limits this request's context, tokens (prompt plus output); 0
	// or above the loaded n_ctx means n_ctx. No reload either way.
	NumCtx int
	// Stop strings end generation; the stop string is not part of Text.
	Stop []string
	// Tools the model may call; their calls come back in
	// Response.ToolCalls. Assistant turns that made calls carry them as
	// CallsText writes them; tool results are "tool" turns.
	Tools []Tool
	// ToolChoice is ToolAuto ("" too), ToolNone or ToolRequired.
	ToolChoice string
	// ToolName, with ToolRequired, is the one tool the model must call.
	ToolName string
	// MaxToolCalls caps the calls of one answer; 0 means
	// DefaultMaxToolCalls, 1 is OpenAI's parallel_tool_calls false.
	MaxToolCalls int
	// Adapters are the LoRA adapters to attach: nil means the cube's
	// default adapters, empty means none.
	Adapters []lora.Spec
	// NoCache skips every KV source (slots, resident and stored packs):
	// the whole prompt is prefilled. Greedy output is the same either way.
	NoCache bool
	// NoPersist skips saving a chat turn's state as a conversation pack.
	NoPersist bool
	// NoUsage records no heat for the memories this request used.
	NoUsage bool
	// RenderOnly returns the rendered prompt (Response.Rendered) and token
	// count without generating (Ollama's _debug_render_only).
	RenderOnly bool
	// OnText, if set, receives output text as it is produced, in order:
	// never a split UTF-8 character or a prefix of a stop string. It is
	// called on the caller's goroutine, may block (the engine goes on and
	// text queues up to 4 MiB, then the request fails) and ends the
	// generation with its error.
	OnText func(text string) error
	// Record says what of a chat turn in a cube is recorded as short-term
	// memory (package convmem): RecordTurn (the default: the last user
	// message and the answer), RecordUser (the message alone, the answer
	// discarded) or RecordNone.
	Record RecordMode
	// Start is when the request began, for TTFT; zero means the call.
	Start time.Time
}

// RecordMode is what Chat records of a turn; see Request.Record.
type RecordMode string

// Record modes.
const (
	RecordTurn RecordMode = ""
	RecordUser RecordMode = "user"
	RecordNone RecordMode = "none"
)

// ParseRecordMode reads a request's record field v: "" (the turn), "user"
// or "none"; anything else is a *FieldError naming field.
func ParseRecordMode(field, v string) (RecordMode, error) {
	switch m := RecordMode(v); m {
	case RecordTurn, RecordUser, RecordNone:
		return m, nil
	}
	return "", badField(field, `%q: want "", "user" or "none"`, v)
}

// CheckRole refuses a message role other than system, user, assistant
// or tool with a *FieldError naming field (layout.CheckRole).
func CheckRole(field, role string) error { return layout.CheckRole(field, role) }

// Usage are a generation's token counts and timings.
type Usage struct {
	PromptTokens   int           `json:"prompt_tokens"` // whole prompt, cached tokens included
	CachedTokens   int           `json:"cached_tokens"` // prompt tokens not decoded (slot, resident or restored KV)
	EvalTokens     int           `json:"eval_tokens"`   // generated tokens
	TTFT           time.Duration `json:"ttft_ns"`       // Start to the first generated token
	PromptDuration time.Duration `json:"prompt_ns"`     // decoding the uncached prompt tokens
	EvalDuration   time.Duration `json:"eval_ns"`       // first generated token to the last
	RestoreTime    time.Duration `json:"restore_ns"`    // restoring a stored pack
	TotalDuration  time.Duration `json:"total_ns"`      // Start to return
	LoadDuration   time.Duration `json:"load_ns"`       // getting the loaded model: loading it, waiting for its load, or finding it loaded (> 0)

	// ComposedTokens are prompt tokens placed from memory chunks (KV
	// computed apart, shifted to their positions; Options.Compose), not
	// counted in CachedTokens; RecomputedTokens, those of them decoded
	// again.
	ComposedTokens   int `json:"composed_tokens"`
	RecomputedTokens int `json:"recomputed_tokens"`
}

// Cache sources of a Response: which KV state the prompt's cached tokens
// came from.
const (
	SourceNone     = ""         // prefilled from scratch
	SourceSlot     = "slot"     // the request sequence still held them (previous turn)
	SourceResident = "resident" // the cube's resident pack, shared in (llama_memory_seq_cp)
	SourceRestored = "restored" // a stored pack, restored (llama_state_seq_set_data)
)

// Response reports one generation.
type Response struct {
	// ID names the answer (Request.ID): feedback on it refers to it
	// (conversation.Feedback), and a turn in a cube is kept under it in
	// the cube's response log (convmem.ResponseRecord).
	ID         string `json:"id"`
	Text       string `json:"response"`
	DoneReason string `json:"done_reason"` // "stop" (end of generation or a stop string) or "length"
	Usage      Usage  `json:"usage"`
	// Context is the tokens the sequence held after the turn: a prefix of
	// the prompt and the output (Ollama's "context"; after a composed turn
	// the slot keeps less, the exact prefix, and the next request
	// prefills the rest).
	Context []int32 `json:"context,omitempty"`
	// Rendered is the prompt text (RenderOnly).
	Rendered string `json:"rendered,omitempty"`
	// CacheSource says where the cached tokens came from (Source*).
	CacheSource string `json:"cache_source,omitempty"`
	// PackID is the stored pack restored, "" if none.
	PackID string `json:"pack_id,omitempty"`
	// Refused is why a stored pack that matched was refused (and the
	// prompt prefilled), "" if none.
	Refused string `json:"refused,omitempty"`
	// PackMemories and Retrieved count the memories the prompt carried:
	// inside the cube's pack, and added by retrieval for the last user
	// turn.
	PackMemories int `json:"pack_memories"`
	Retrieved    int `json:"retrieved_memories"`
	// PackMemoryIDs and RetrievedIDs name those memories (textmem ids):
	// len(PackMemoryIDs) == PackMemories, in pack order, and
	// len(RetrievedIDs) == Retrieved, best match first. Empty, never nil,
	// for a prompt without memories. Per-memory KV chunks are not composed
	// into requests, so no third list names composed memories.
	PackMemoryIDs []string `json:"pack_memory_ids"`
	RetrievedIDs  []string `json:"retrieved_memory_ids"`
	// PreferenceIDs name the preference memories retrieval added for the
	// last user turn in their own "User preferences:" block
	// (layout.Options.PreferenceK), best match first; they are not in
	// RetrievedIDs nor counted in Retrieved. Empty, never nil.
	PreferenceIDs []string `json:"preference_memory_ids"`
	// CubeMemories counts the memories of the prompt (pack, retrieved and
	// preferences) by the cube each lives in; absent for a prompt without
	// memories.
	CubeMemories map[string]int `json:"cube_memories,omitempty"`
	// Adapters is the attached adapter set (runtime.AdapterKey), "" none.
	Adapters string `json:"adapters,omitempty"`
	// ToolCalls are the calls the model made (Request.Tools); Text is
	// then empty. Calls cut short by num_predict stay in Text, with
	// DoneReason "length".
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// NewResponseID returns a new response id: "resp_", 16 hex digits of Unix
// nanoseconds and 8 random ones, so that ids sort by time (a cube's
// response log keeps them in that order).
func NewResponseID() string {
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
	_, _ = rand.Read(b[8:])
	return "resp_" + hex.EncodeToString(b[:])
}

// Tool is a function the model may call (OpenAI's and Ollama's "tools"):
// a Name of 1 to 64 of [A-Za-z0-9_-], a Description for the model, and
// the JSON schema of its arguments object as Parameters (nil: any
// object). It is package toolcall's Tool.
type Tool = toolcall.Tool

// ToolCall is one call the model made: an ID ("call_" and 24 hex digits),
// a Request.Tools Name, and Arguments, a compact JSON object valid under
// the tool's Parameters. It is package toolcall's Call.
type ToolCall = toolcall.Call

// Tool choices (Request.ToolChoice), as OpenAI's tool_choice names them.
const (
	ToolAuto     = toolcall.Auto     // the model answers in prose or calls tools ("" too)
	ToolNone     = toolcall.None     // no call: the tools are not shown to the model
	ToolRequired = toolcall.Required // at least one call (Request.ToolName: that tool only)
)

// DefaultMaxToolCalls bounds the calls of one answer when
// Request.MaxToolCalls is 0.
const DefaultMaxToolCalls = toolcall.DefaultMaxCalls

// CallsText is the text of an assistant turn that made calls, as the
// model writes it under the tool grammar: content (if any) then a JSON
// array of {"name", "arguments"}. Wire layers put a previous turn's
// tool_calls back into the conversation with it.
func CallsText(content string, calls []ToolCall) string { return toolcall.Text(content, calls) }

// CheckID checks a request's own id (Request.ID): "resp_" and at most
// 64 bytes of letters, digits, '_' and '-', or a *errkind.FieldError.
func CheckID(id string) error {
	rest, ok := strings.CutPrefix(id, "resp_")
	if !ok || rest == "" || len(id) > 64 || strings.ContainsFunc(rest, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) {
		return badField("id", "%q: want resp_ and at most 64 bytes of letters, digits, _ and -", id)
	}
	return nil
}

// MaxEmbedInputs bounds the texts of one Embed call (HTTP 400 beyond; the
// request body is bounded in bytes by the server, 413).
const MaxEmbedInputs = 2048

// Embedding is what EmbedWith returns.
type Embedding struct {
	Vectors [][]float32 // one per text: [len(texts)][dim]
	Tokens  int         // the input's token count (0 from an Embedder or the upstream)
	// LoadDuration is the time spent getting the loaded model (loading
	// it, waiting for another request's load, or finding it loaded) when
	// a model embedded, 1 ns with an Embedder or the upstream: always > 0,
	// as Ollama's load_duration
	LoadDuration time.Duration
}

// MaxCubes is the most cubes one request may name: its own (Request.Cube)
// and the ones it reads (Request.ReadCubes) together.
const MaxCubes = 8

// ReadCubes returns req.ReadCubes checked: each a cube name, not req.Cube,
// at most MaxCubes in all with req.Cube; names given twice are kept once,
// in the order first given. Errors: *errkind.FieldError naming "cubes"
// (also for ReadCubes without a Cube). Whether the cubes exist is the
// pipeline's check.
func ReadCubes(req *Request) ([]string, error) {
	if req.Cube == "" {
		return nil, badField("cubes", "cubes to read need a cube to write (the first cube named)")
	}
	var names []string
	for _, c := range req.ReadCubes {
		if !textmem.ValidCube(c) {
			return nil, badField("cubes", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", c)
		}
		if c != req.Cube && !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	if len(names)+1 > MaxCubes {
		return nil, badField("cubes", "%d cubes named, at most %d", len(names)+1, MaxCubes)
	}
	return names, nil
}
