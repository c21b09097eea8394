package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime/llama"
)

// message is one chat turn in wire-neutral form.
type message struct {
	Role    string // "system", "user", "assistant", "tool"
	Content string
}

// genRequest is one inference request, whichever API it came from.
type genRequest struct {
	Cube     string
	Messages []message // chat; nil for a completion
	Prompt   string    // completion prompt (Messages == nil)
	System   string    // completion system text (Ollama /api/generate)
	Raw      bool      // completion without template or memories
	// Adapters are the LoRA adapters asked for: nil means the cube's
	// defaults, empty means none.
	Adapters []lora.Spec
	// Context is Ollama's /api/generate "context": tokens of the previous
	// exchange; the rendered prompt's tokens follow them.
	Context  []int32
	Sampling llama.SamplerParams
	// Format is the structured-output format as Ollama's API takes it
	// ("json" or a JSON schema), nil for free text. The llama backend
	// enforces it through Grammar; the ollama backend forwards it.
	Format json.RawMessage
	// Grammar is Format as GBNF (runtime/grammar), "" for free text.
	Grammar string
	// NumPredict caps generated tokens; <= 0 means the server default.
	NumPredict int
	Stop       []string
	NumCtx     int // requested context; capped at the loaded one
	// RenderOnly returns the rendered prompt without generating
	// (Ollama's _debug_render_only).
	RenderOnly bool
	// Persist saves the conversation state afterwards (chat turns).
	Persist bool
	// OnText receives output text as produced; an error ends generation.
	OnText func(string) error
	Start  time.Time
}

// genResult reports one generation.
type genResult struct {
	Text         string
	Rendered     string // prompt text as rendered (RenderOnly)
	PromptTokens int    // whole prompt
	CachedTokens int    // prompt tokens not decoded (resident, shared or restored)
	EvalTokens   int
	Context      []int // tokens the sequence holds afterwards (Ollama "context")
	TTFT         time.Duration
	PromptTime   time.Duration
	EvalTime     time.Duration
	DoneReason   string // "stop" or "length"
	Adapters     string // active adapter set (runtime.AdapterKey), "" for none
	Memories     int    // memories put into the prompt
	CacheSource  string // "", "resident", "shared", "restored"
}

// modelInfo describes the served model.
type modelInfo struct {
	Name      string
	Size      int64
	Digest    string
	Family    string
	ParamSize string
	Quant     string
	NCtx      int
	Template  string
	Modified  time.Time
	Info      map[string]any
}

// backend serves inference. Implementations are safe for concurrent use.
type backend interface {
	model() modelInfo
	generate(ctx context.Context, req *genRequest) (genResult, error)
	// embed returns [len(texts)][dim]float32 and the input token count.
	embed(ctx context.Context, texts []string) ([][]float32, int, error)
	// warm computes the cube's pack; resident keeps it in a reserved slot.
	warm(ctx context.Context, cube string, resident bool) (packStatus, error)
	// packs reports the cube's packs and resident state.
	packs(cube string) (packStatus, error)
	// dropCube forgets resident state of cube (after its deletion).
	dropCube(cube string)
	// stats reports slot and KV usage for /api/ps and /metrics.
	stats() backendStats
	// close stops background work (not the engine, which the caller owns).
	close(ctx context.Context) error
}

type backendStats struct {
	Kind          string // "llama" or "ollama"
	NCtx          int
	Slots         int
	BusySlots     int
	ResidentCells int
	PendingWrites int
	Queued        int // requests waiting for a slot
	EngineActive  int // requests in the engine's running batch
	EngineQueued  int // requests waiting for the engine's admission
}

// packStatus is the body of GET/POST /v1/cubes/{cube}/pack.
type packStatus struct {
	Cube          string     `json:"cube"`
	Packs         []packInfo `json:"packs"`
	Resident      *resident  `json:"resident,omitempty"`
	ResidentCells int        `json:"resident_cells"` // all resident packs, cells of n_ctx
	NCtx          int        `json:"n_ctx"`
	Memories      int        `json:"memories,omitempty"` // in the pack just warmed
	WarmMs        float64    `json:"warm_ms,omitempty"`
}

type packInfo struct {
	ID        string    `json:"id"`
	Label     string    `json:"label"`
	NTokens   int       `json:"n_tokens"`
	RawBytes  int64     `json:"raw_bytes"`
	BlobBytes int64     `json:"blob_bytes"`
	InRAM     bool      `json:"in_ram"`
	Created   time.Time `json:"created"`
}

type resident struct {
	Seq     int       `json:"seq"`
	Tokens  int       `json:"tokens"`
	PackID  string    `json:"pack_id"`
	Created time.Time `json:"created"`
}
