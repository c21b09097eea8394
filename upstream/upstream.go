package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/toolcall"
)

// The APIs an upstream speaks (Options.API).
const (
	APIOllama = "ollama" // Ollama's native API: /api/chat, /api/generate, /api/embed
	APIOpenAI = "openai" // OpenAI's: /v1/chat/completions, /v1/completions, /v1/embeddings
)

// DefaultTimeout bounds one upstream request when Options.Timeout is 0.
const DefaultTimeout = 10 * time.Minute

// Errors of the upstream backends. A 429 of the upstream is
// slots.ErrQueueFull (memosrt's ErrBusy), a 400 an *errkind.FieldError
// naming the field "upstream".
var (
	// ErrUpstream: the upstream failed (unreachable, timed out, a 5xx, an
	// answer that cannot be read, a refused API key); HTTP 502.
	ErrUpstream = errkind.New(errkind.Upstream, "memosrt: upstream failed")
	// ErrModelNotFound: the upstream answered 404 (it serves no such
	// model). Package pipeline returns the same sentinel for a model name
	// it does not serve.
	ErrModelNotFound = errkind.New(errkind.NotFound, "memosrt: model not found")
)

// Options configure an upstream backend.
type Options struct {
	// API is APIOllama ("" too) or APIOpenAI.
	API string
	// URL of the server. Ollama: its root, e.g. http://127.0.0.1:11434.
	// OpenAI: its root (http://127.0.0.1:8000; "/v1" is appended) or its
	// API base ending in /v1 (http://127.0.0.1:8000/v1, taken as is).
	// Required.
	URL string
	// Model is the upstream model name. Required.
	Model string
	// EmbedModel embeds (Backend.Embed). Default Model.
	EmbedModel string
	// APIKey, when set, is sent as "Authorization: Bearer APIKey" on every
	// upstream request (OpenAI). It is never logged.
	APIKey string
	// Timeout bounds one upstream request, its streamed answer included.
	// Default DefaultTimeout.
	Timeout time.Duration
}

// LogValue implements slog.LogValuer: the options without the API key
// (only whether one is set).
func (o Options) LogValue() slog.Value {
	return slog.GroupValue(slog.String("api", o.API), slog.String("url", o.URL), slog.String("model", o.Model),
		slog.String("embed_model", o.EmbedModel), slog.Bool("api_key", o.APIKey != ""), slog.Duration("timeout", o.Timeout))
}

// String is the options without the API key, as LogValue.
func (o Options) String() string {
	return fmt.Sprintf("{api %s url %s model %s embed_model %s api_key %t timeout %s}", o.API, o.URL, o.Model, o.EmbedModel, o.APIKey != "", o.Timeout)
}

// GoString is String, so that %#v does not print the API key either.
func (o Options) GoString() string { return "upstream.Options" + o.String() }

// Validate reports every problem of o at once (package config wraps them
// in its ErrBadOptions).
func (o Options) Validate() error {
	var errs []error
	switch o.API {
	case "", APIOllama, APIOpenAI:
	default:
		errs = append(errs, fmt.Errorf("Upstream API %q: want %q or %q", o.API, APIOllama, APIOpenAI))
	}
	if o.URL == "" || o.Model == "" {
		errs = append(errs, fmt.Errorf("Upstream needs URL and Model (got %q, %q)", o.URL, o.Model))
	} else if u, err := url.Parse(o.URL); err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		errs = append(errs, fmt.Errorf("Upstream URL %q is not an absolute http(s) URL", o.URL))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("Upstream Timeout %s < 0", o.Timeout))
	}
	return errors.Join(errs...)
}

// Sampling are the sampler settings a request may pass upstream; the
// zero value is greedy decoding. Which of them an API takes is written on
// each backend (New).
type Sampling struct {
	Temperature   float32 // softmax temperature; 0: greedy
	TopK          int     // 0: off
	TopP          float32 // 0: off
	MinP          float32 // 0: off
	RepeatPenalty float32 // 0: off
	Seed          uint32
}

// Request is one generation through the upstream. Chat requests carry
// Messages, the conversation with the cube's memories already in it
// (package layout); a completion carries Prompt (and System, Raw,
// Context as Ollama's /api/generate takes them), and Messages when the
// pipeline assembled them (a completion in a cube: the pack as a system
// turn, the prompt as the last user turn).
type Request struct {
	Chat     bool
	Messages []layout.Message
	Prompt   string
	System   string
	Raw      bool
	Context  []int32 // tokens of a previous exchange (Ollama only)
	Sampling Sampling
	// NumPredict caps generated tokens: > 0 a cap; 0 the upstream's
	// default; -1 (no cap) and -2 (fill the context) as Ollama's
	// num_predict (OpenAI: no cap).
	NumPredict int
	NumCtx     int // context tokens (Ollama only); 0: the upstream's
	Stop       []string
	// Format is the structured-output format as Ollama takes it: "json"
	// or a JSON schema object; nil for text.
	Format json.RawMessage
	// Tools the model may call, ToolChoice (toolcall.Auto, None or
	// Required), ToolName (with Required, the one tool to call) and
	// MaxToolCalls (1: one call at most; 0 the upstream's default).
	Tools        []toolcall.Tool
	ToolChoice   string
	ToolName     string
	MaxToolCalls int
	// RenderOnly asks for the rendered prompt without generating
	// (Ollama's _debug_render_only).
	RenderOnly bool
	// OnText is a hook: if set, it receives the answer's text as the
	// upstream streams it, in order, on the caller's goroutine; its error
	// ends the request.
	OnText func(text string) error
}

// Result is what the upstream answered, with its own counts: the token
// counts are the upstream's (0 where it reported none), never estimated.
type Result struct {
	Text       string
	ToolCalls  []toolcall.Call
	DoneReason string // "stop" or "length"
	// PromptTokens, CachedTokens (of them, the upstream's cache hits) and
	// EvalTokens (generated), as the upstream counted them.
	PromptTokens, CachedTokens, EvalTokens int
	// The upstream's timings, where it reports them (Ollama).
	PromptDuration, EvalDuration, LoadDuration time.Duration
	Rendered                                   string  // RenderOnly (Ollama)
	Context                                    []int32 // Ollama's /api/generate context
}

// Backend is an upstream server. Generate answers req (streaming its text
// through req.OnText); Embed embeds texts with Options.EmbedModel and
// returns [len(texts)][dim]float32 and the upstream's token count (0 if
// it reports none). Errors: ErrUpstream, ErrModelNotFound,
// slots.ErrQueueFull (a 429), *errkind.FieldError (a 400, or a request
// field the API cannot carry), ctx's error. Safe for concurrent use.
type Backend interface {
	// API is APIOllama or APIOpenAI.
	API() string
	Generate(ctx context.Context, req *Request) (*Result, error)
	Embed(ctx context.Context, texts []string) ([][]float32, int, error)
}

// New returns the backend o.API names: Ollama's API (the default) or
// OpenAI's. Errors: Options.Validate's.
func New(o Options) (Backend, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.EmbedModel == "" {
		o.EmbedModel = o.Model
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.API == APIOpenAI {
		return newOpenAI(o), nil
	}
	return newOllama(o), nil
}

// badField is a *errkind.FieldError naming the request field at fault.
func badField(field, format string, args ...any) error {
	return &errkind.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// statusErr maps an upstream's HTTP status and message: 429 busy, 400 the
// request's fault, 401/403 a refused key, 404 no such model, the rest
// ErrUpstream.
func statusErr(api string, code int, msg string) error {
	switch code {
	case 429:
		return fmt.Errorf("%w: upstream: %s", slots.ErrQueueFull, msg)
	case 400:
		return badField("upstream", "%s", msg)
	case 401, 403:
		return fmt.Errorf("%w: the upstream refused the request's credentials (HTTP %d; check the upstream API key): %s", ErrUpstream, code, msg)
	case 404:
		return fmt.Errorf("%w: %s", ErrModelNotFound, msg)
	}
	return fmt.Errorf("%w: %s upstream answered HTTP %d: %s", ErrUpstream, api, code, msg)
}
