package memosrt

import (
	"context"
	"time"

	"github.com/memosrt/memosrt/config"
	"github.com/memosrt/memosrt/internal/gate"
	"github.com/memosrt/memosrt/pipeline"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/upstream"
)

type (
	// ModelSpec names a GGUF file the OS serves besides Options.Model:
	// listed at once, loaded on its first request.
	ModelSpec = config.ModelSpec
	// ModelInfo describes a served model.
	ModelInfo = pipeline.ModelInfo
	// ModelState is a model the OS serves and whether it is loaded now.
	ModelState = pipeline.ModelState
	// Stats are the OS's gauges (HTTP /api/ps and /metrics).
	Stats = pipeline.Stats
	// Options configure an OS; see package config for every field.
	Options = config.Options
	// UpstreamOptions configure the text-only upstream backend: an Ollama
	// server or an OpenAI-compatible one (API), its URL and model, an API
	// key.
	UpstreamOptions = config.UpstreamOptions
)

// The APIs an upstream speaks (UpstreamOptions.API).
const (
	UpstreamOllama = upstream.APIOllama // Ollama's native API (the default)
	UpstreamOpenAI = upstream.APIOpenAI // OpenAI's /v1/chat/completions, /v1/completions, /v1/embeddings
)

// DefaultMaxModels is how many models stay loaded at once when
// Options.MaxModels is 0.
const DefaultMaxModels = pipeline.DefaultMaxModels

// DefaultOptions returns Options with every default filled in except Dir
// and Model.
func DefaultOptions() Options { return config.DefaultOptions() }

// Load loads model name ("" the primary) now, as a request would, and
// sets its keep-alive (nil: Options.KeepAlive); an Ollama request without
// a prompt does this. Errors: ErrModelNotFound, ErrBusy when every loaded
// model is in use and another would pass the budget, load errors, ctx's
// error, ErrClosed.
func (o *OS) Load(ctx context.Context, name string, keep *time.Duration) (ModelInfo, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (ModelInfo, error) { return o.p.Load(ctx, name, keep) })
}

// Unload unloads model name ("" the primary) once its running requests
// end, after saving their conversation states (Ollama's keep_alive 0). A
// model not loaded is a no-op. Errors: ErrModelNotFound, ErrClosed.
func (o *OS) Unload(ctx context.Context, name string) error {
	return gate.Do(o.g, ctx, func(ctx context.Context) error { return o.p.Unload(ctx, name) })
}

// Models lists the models the OS serves, the primary first. Without a
// model: the upstream's, or none.
func (o *OS) Models() []ModelState { return o.p.Models() }

// Model describes the primary model (the upstream's with Upstream; zero
// ModelInfo without one), as of its last load.
func (o *OS) Model() ModelInfo { return o.p.Model() }

// Stats reports the OS's gauges now.
func (o *OS) Stats() Stats { return o.p.Stats() }

// Engine returns the primary model's engine, nil without a model or while
// it is unloaded; for tools and tests that drive the engine below the OS
// (writes through it bypass the scheduler's bookkeeping).
func (o *OS) Engine() *runtime.Engine { return o.p.Engine() }
