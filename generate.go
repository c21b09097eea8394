package memosrt

import (
	"context"
	"time"

	"github.com/memosrt/memosrt/internal/gate"
	"github.com/memosrt/memosrt/pipeline/request"
)

// The request and its answer (package pipeline/request defines them; see
// there for every field).
type (
	// Request is one generation: Chat takes Messages, Generate takes
	// Prompt (with System, Raw and Context as Ollama's /api/generate).
	Request = request.Request
	// Response reports one generation.
	Response = request.Response
	// Usage are a generation's token counts and timings.
	Usage = request.Usage
	// Message is one chat turn: Role is "system", "user", "assistant" or
	// "tool".
	Message = request.Message
	// Sampling are the per-request sampler settings; the zero value is
	// greedy decoding.
	Sampling = request.Sampling
	// RecordMode is what Chat records of a turn; see Request.Record.
	RecordMode = request.RecordMode
	// Tool is a function the model may call (Request.Tools).
	Tool = request.Tool
	// ToolCall is one call the model made (Response.ToolCalls).
	ToolCall = request.ToolCall
	// Embedding is what EmbedWith returns.
	Embedding = request.Embedding
)

// Record modes (Request.Record).
const (
	RecordTurn = request.RecordTurn // the last user message and the answer (the default)
	RecordUser = request.RecordUser // the message alone
	RecordNone = request.RecordNone // nothing
)

// Cache sources of a Response (Response.CacheSource).
const (
	SourceNone     = request.SourceNone     // prefilled from scratch
	SourceSlot     = request.SourceSlot     // the request sequence still held them (previous turn)
	SourceResident = request.SourceResident // the cube's resident pack, shared in
	SourceRestored = request.SourceRestored // a stored pack, restored
)

// Tool choices (Request.ToolChoice).
const (
	ToolAuto     = request.ToolAuto     // the model answers in prose or calls tools ("" too)
	ToolNone     = request.ToolNone     // no call: the tools are not shown to the model
	ToolRequired = request.ToolRequired // at least one call (Request.ToolName: that tool only)
)

// Request limits.
const (
	// DefaultMaxToolCalls caps the calls of one answer when
	// Request.MaxToolCalls is 0.
	DefaultMaxToolCalls = request.DefaultMaxToolCalls
	// MaxStops and MaxStopBytes bound Request.Stop.
	MaxStops     = request.MaxStops
	MaxStopBytes = request.MaxStopBytes
	// MaxEmbedInputs bounds the texts of one Embed call.
	MaxEmbedInputs = request.MaxEmbedInputs
	// MaxCubes bounds the cubes of one request (Request.Cube and
	// Request.ReadCubes together).
	MaxCubes = request.MaxCubes
)

// ParseRecordMode reads a request's record field v: "" (the turn), "user"
// or "none"; anything else is a *FieldError naming field.
func ParseRecordMode(field, v string) (RecordMode, error) { return request.ParseRecordMode(field, v) }

// CheckRole refuses a message role other than system, user, assistant or
// tool with a *FieldError naming field.
func CheckRole(field, role string) error { return request.CheckRole(field, role) }

// CallsText is an assistant turn's text carrying its tool calls, as the
// model is shown them in later turns.
func CallsText(content string, calls []ToolCall) string { return request.CallsText(content, calls) }

// Chat runs one chat turn in req.Cube: req.Messages is the conversation,
// the last turn usually the user's. The prompt is assembled from the tiers
// (the cube's pack, memories retrieved for the last user turn, the
// conversation; see layout.Layout), its longest cached prefix is reused
// (a free sequence that holds it, the cube's resident pack, or a stored
// pack), the rest is prefilled and the answer generated; afterwards the
// conversation's KV state is saved in the background (unless NoPersist),
// the memories used count towards their heat and the turn is recorded
// (Request.Record). Errors: *FieldError (HTTP 400) for a bad request,
// ErrUnknownCube, ErrBusy, ErrNoModel, ErrClosed, lora errors for
// adapters, ctx's error.
func (o *OS) Chat(ctx context.Context, req Request) (*Response, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (*Response, error) { return o.p.Chat(ctx, req) })
}

// Generate completes req.Prompt: with a cube, the prompt is a user turn
// after the cube's pack (and req.System as a system turn), as Chat does;
// Raw sends the prompt as is; Context continues an earlier exchange. The
// state is not saved as a conversation pack. Errors as Chat.
func (o *OS) Generate(ctx context.Context, req Request) (*Response, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (*Response, error) { return o.p.Generate(ctx, req) })
}

// Embed returns one vector per text with the primary model (or
// Options.Embedder, or the upstream) and the input's token count.
// Errors as EmbedWith.
func (o *OS) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	e, err := o.EmbedWith(ctx, "", nil, texts)
	return e.Vectors, e.Tokens, err
}

// HasEmbedder reports whether Options.Embedder is set.
func (o *OS) HasEmbedder() bool { return o.p.HasEmbedder() }

// EmbedWith embeds texts with model ("" the primary; loaded first if
// needed, then kept alive for keep, nil: Options.KeepAlive), or with
// Options.Embedder or the upstream when set. Errors: *FieldError for more
// than MaxEmbedInputs texts, ErrModelNotFound, ErrNoModel, embed.ErrShape,
// ErrClosed, ctx's error.
func (o *OS) EmbedWith(ctx context.Context, model string, keep *time.Duration, texts []string) (Embedding, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (Embedding, error) { return o.p.EmbedWith(ctx, model, keep, texts) })
}

// NewResponseID returns a new response id (Request.ID, Response.ID):
// "resp_", then 16 hex digits of Unix nanoseconds and 8 random ones.
func NewResponseID() string { return request.NewResponseID() }
