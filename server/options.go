package server

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// Options configure a Server. Zero means the default given.
type Options struct {
	// DB is the data directory's database; the server keeps its cube
	// registry there under the key prefix "srv/". Required.
	DB *badger.DB
	// Store is the text tier. Required.
	Store *textmem.Store
	// KV is the activation tier; nil disables packs and conversation reuse
	// across restarts.
	KV *kvcache.Cache
	// Tiers, if set, answers GET /v1/cubes/{cube}/tiers and counts search
	// hits as visits (heat); nil answers 501 there.
	Tiers *scheduler.Tiers
	// Embedder answers /api/embed and /v1/embeddings for the llama backend;
	// nil embeds with the loaded model (runtime.Engine.Embed).
	Embedder embed.Embedder
	// Token, when set, is required as "Authorization: Bearer <Token>" on
	// every request.
	Token string
	// Version is reported by /api/version. Default "0.0.0".
	Version string
	// MaxQueue is how many requests may wait for a slot; one more gets
	// 429 at once. Default 64; negative means none may wait.
	MaxQueue int
	// MaxBodyBytes bounds a request body, bytes; larger gets 413.
	// Default 8 MiB.
	MaxBodyBytes int64
	// MaxImportBytes bounds an imported cube archive, bytes. Default 4 GiB.
	MaxImportBytes int64
	// NoPersist turns off saving a chat turn's sequence state as a pack
	// labelled "conv:<cube>" (see package doc). By default a state of at
	// least MinPersistTokens tokens is saved in the background after the
	// turn, and the pack of the turn it continues is dropped.
	NoPersist bool
	// MinPersistTokens is the shortest conversation state worth a pack,
	// tokens. Default 128.
	MinPersistTokens int
	// DefaultNumPredict caps generated tokens when a request sets no limit
	// (Ollama num_predict -1, OpenAI max_tokens unset); 0 means until n_ctx.
	DefaultNumPredict int
	// Logger receives request logs; nil discards.
	Logger *slog.Logger
	// Now is the clock for response timestamps. Default time.Now.
	Now func() time.Time
}

// DefaultOptions returns Options with every default filled in except the
// required resources.
func DefaultOptions() Options {
	return Options{Version: "0.0.0", MaxQueue: 64, MaxBodyBytes: 8 << 20, MaxImportBytes: 4 << 30,
		MinPersistTokens: 128, Now: time.Now}
}

func (o *Options) ensureDefaults() {
	d := DefaultOptions()
	if o.Version == "" {
		o.Version = d.Version
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = d.MaxQueue
	} else if o.MaxQueue < 0 {
		o.MaxQueue = 0
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = d.MaxBodyBytes
	}
	if o.MaxImportBytes == 0 {
		o.MaxImportBytes = d.MaxImportBytes
	}
	if o.MinPersistTokens == 0 {
		o.MinPersistTokens = d.MinPersistTokens
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	var errs []error
	if o.DB == nil {
		errs = append(errs, errors.New("DB is nil"))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("Store is nil"))
	}
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d < 0", o.MaxBodyBytes))
	}
	if o.MaxImportBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxImportBytes %d < 0", o.MaxImportBytes))
	}
	if o.MinPersistTokens < 0 {
		errs = append(errs, fmt.Errorf("MinPersistTokens %d < 0", o.MinPersistTokens))
	}
	if o.DefaultNumPredict < 0 {
		errs = append(errs, fmt.Errorf("DefaultNumPredict %d < 0", o.DefaultNumPredict))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadOptions, errors.Join(errs...))
	}
	return nil
}

// EngineOptions configure the llama backend (UseEngine).
type EngineOptions struct {
	// Name is the model name clients use ("stories260K"). Required.
	Name string
	// Parallel is the number of request slots (sequences generating at
	// once). Default: the engine's NSeqMax minus ResidentPacks.
	Parallel int
	// ResidentPacks is the number of sequences reserved for hot packs kept
	// resident in the KV cache (POST /v1/cubes/{cube}/pack with
	// "resident": true). Default 0. Parallel+ResidentPacks <= NSeqMax.
	ResidentPacks int
	// ModelPath, shown by /api/show; optional.
	ModelPath string
	// Adapters lends LoRA adapters to requests (the request's "adapters",
	// else its cube's defaults); nil: requests naming adapters get 400. The
	// engine must be loaded with runtime.Options.LoRA and the Manager
	// created with Options.Detach = eng.DetachAdapter. Owned by the caller.
	Adapters *lora.Manager
	// ChatTemplate overrides the model's chat template: a template text or
	// a llama.cpp built-in name such as "chatml". Default: the model's; a
	// model without one gets the plain layout (see llamaBackend.render).
	ChatTemplate string
}

// OllamaOptions configure the text-only fallback backend (UseOllama).
type OllamaOptions struct {
	// URL of the Ollama server, e.g. "http://127.0.0.1:11434". Required.
	URL string
	// Model is the upstream model generating text. Required.
	Model string
	// EmbedModel is the upstream embedding model. Default Model.
	EmbedModel string
	// Name is the model name clients use. Default Model.
	Name string
	// Parallel bounds concurrent upstream requests. Default 4.
	Parallel int
	// MaxMemoryBytes bounds the memory text put into a prompt, bytes.
	// Default 32 KiB.
	MaxMemoryBytes int
	// Timeout of one upstream request. Default 10 minutes.
	Timeout time.Duration
}
