package config

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/layout"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/kvgate"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
	"github.com/memosrt/memosrt/upstream"
)

// Options configure an OS. Zero means the default given; DefaultOptions
// returns them filled in.
type Options struct {
	// Dir is the data directory: one Badger database holding the text
	// tier, the activation tier's packs, tier state, cubes and adapters.
	// Required.
	Dir string
	// EncryptionKey, when set, encrypts the data directory at rest
	// (AES-CTR, 16, 24 or 32 bytes; datadir.Options.EncryptionKey). A
	// directory created encrypted cannot be opened without it.
	EncryptionKey []byte
	// NoSync commits without fsync (tests): an acknowledged write can be
	// lost on power loss. Default false.
	NoSync bool
	// KVShared, when set, shares the activation tier with other nodes
	// (package kvcache/redis, which an app imports only if it wants it): every pack this node stores is written there too,
	// and a prefix lookup its own levels answer less well looks there
	// (kvcache.Options.Shared). With EncryptionKey set, packs are encrypted
	// before they leave the node, under a key derived from it: nodes that
	// share packs use the same key. The caller owns it (Close leaves it open).
	KVShared kvcache.Shared
	// TextStore, when set, keeps the text tier (memories, their versions,
	// vectors and index records) and the cube records there instead of in
	// the data directory (package textmem/postgres): nodes sharing it see each
	// other's memories and cubes, each keeping its in-memory indexes
	// current from the store's change notices (textmem.Watcher). With
	// EncryptionKey set, open it with TextStoreKey(EncryptionKey). The
	// caller owns it (Close leaves it open). Default: the data directory.
	TextStore textmem.Backend
	// TextStoreLocal opens the data directory's own text tier even though
	// it was served with a TextStore (which Open otherwise refuses with
	// ErrTextStoreElsewhere), and forgets that it was: to reach memories
	// it held before, or to leave the shared store.
	TextStoreLocal bool

	// Model is the GGUF file to load. Empty opens the OS without a model:
	// cubes, memories, search and tier state work; Chat, Generate, Warm
	// and Tick return ErrNoModel (unless Upstream is set).
	Model string
	// ModelName is the name clients see. Default: Model's file name
	// without ".gguf" (Upstream: its model).
	ModelName string
	// Models are more models to serve besides Model, listed at once and
	// loaded on their first request (Request.Model). They share the data
	// directory; each keeps its own conversation packs (the model
	// fingerprint keys them), while the tier scheduler builds tier and
	// resident packs for Model only. Same Engine settings as Model.
	Models []ModelSpec
	// KeepAlive is how long a model stays loaded after its last request
	// when the request names none (Request.KeepAlive): Ollama's
	// OLLAMA_KEEP_ALIVE. nil or negative: until Close (the default); 0:
	// unloaded after each request (its conversation states saved first).
	KeepAlive *time.Duration
	// MaxModels bounds the models loaded at once; loading one more unloads
	// the least recently used idle one (Ollama's OLLAMA_MAX_LOADED_MODELS).
	// Default DefaultMaxModels.
	MaxModels int
	// ModelBytes bounds the file bytes of the loaded models (their weights
	// in RAM), as MaxModels does; 0: no bound.
	ModelBytes int64
	// Engine holds the engine's load-time settings (n_ctx, threads, KV
	// types, GPU layers, ...). Open sets ModelPath, NSeqMax, LoRA and
	// Logger itself; zero fields take runtime.DefaultOptions.
	Engine runtime.Options
	// Parallel is how many requests generate at once (request sequences).
	// Default 4.
	Parallel int
	// ResidentSeqs is how many sequences may hold resident packs: cells of
	// a hot cube's pack kept in the KV cache and shared into requests with
	// llama_memory_seq_cp. Default 2; negative: no resident level.
	ResidentSeqs int
	// ResidentCells bounds the KV cells all resident packs hold together,
	// counted against n_ctx. Default n_ctx/4.
	ResidentCells int
	// ResidentAt is the pack heat at or above which a cube's pack is made
	// resident. Default Tiers.Heat.PromoteAt.
	ResidentAt float64
	// AdapterBytes bounds the loaded adapters' tensor bytes. Default 1 GiB.
	AdapterBytes int64

	// Layout shapes prompts: preamble, pack token budget (default n_ctx/2),
	// retrieved memories per request (default 5), chat template.
	Layout layout.Options
	// Tiers configures heat (MemoryOS), the KV byte budget of the
	// activation tier, job chunking and the tick period (default 10 s),
	// and the parametric tier (Tiers.Parametric, off by default; its
	// adapter files go to Dir/adapters unless Parametric.Dir is set).
	Tiers scheduler.TierOptions
	// KVCodec is how cube packs are stored (package kvgate): "exact"
	// (default: byte-identical to the live KV), "auto" (the smallest lossy
	// codec the calibration gate passes for the model), "q8" or "q4" (that
	// codec, if the gate passes it). Until the model is calibrated (in the
	// background, the first time a pack of it is computed), and where the
	// gate refuses, packs are stored exact. Conversation packs are always
	// exact.
	KVCodec string
	// KVGate is the targets the gate's settings must meet (zero fields:
	// top-1 99%, greedy paths 90%, recompute ceiling 0.40).
	KVGate kvgate.Targets
	// RAMBytes bounds the decompressed pack states kept in RAM (the RAM
	// level of the activation tier), bytes of Go heap; a state larger than
	// it is never kept (restores read it from disk). Default 128 MiB.
	RAMBytes int64
	// Compose is the recompute fraction of composition: a chat turn whose
	// retrieved memories have KV chunks restores them after its reused
	// prefix, K-shifted to their positions, and decodes this fraction of
	// their tokens again (runtime.ComposeOptions.Ratio) instead of
	// prefilling them. In (0, 1]; 0, the default: off (exact prefill).
	Compose float64
	// ComposeRatio is a hook: when set, it is asked once per model load
	// with the model's KV key (kvcache.ConfigKey of its KV config, the
	// model's fingerprint included) and its answer, when ok, replaces
	// Compose for that model (a per-model calibration; 0 turns it off).
	ComposeRatio func(modelKey string) (ratio float64, ok bool)
	// ComposeAuto lets the calibration gate (package kvgate) decide
	// composition per model: the first turn that could compose starts a
	// calibration in the background and is prefilled exactly, as every
	// turn is until the decision; then the gate's fraction is used, or
	// composition stays off for a model that met no fraction within the
	// targets (KVGate). Compose and ComposeRatio are then ignored.
	ComposeAuto bool
	// ChunkAfterUses is how many times a memory must be retrieved into
	// prompts (since load) before a tick computes its KV chunk, with
	// composition on. Default 3.
	ChunkAfterUses int
	// TickAfterUses runs a tick early once this many memory uses were
	// recorded since the last one (a burst of usage). Default 16.
	TickAfterUses int
	// UsageFlush is the longest recorded uses wait in RAM before they are
	// written (one Badger transaction per flush, off the request path).
	// Default 100 ms.
	UsageFlush time.Duration
	// GCInterval is the period of the background loop's value-log GC
	// (datadir.DB.Reclaim: files at least half stale are rewritten, after a
	// flush and compaction when the value log grew by a file since the
	// last such pass); the loop also runs it as soon as the value log has
	// grown by a file since the last pass (datadir.DB.ReclaimDue), and
	// Open reclaims once (datadir.Open). Default 1 min.
	GCInterval time.Duration
	// NoScheduler turns the background loop off: no periodic ticks, no
	// resident level changes; Tick still runs on demand. Default false.
	NoScheduler bool
	// OneSequence loads each model with a single sequence, the request
	// slot's: for a process that serves one request at a time and computes
	// no packs itself (`memosrt run`). Restoring a stored pack into the
	// slot, conversation packs and LoRA work as with more sequences; tier
	// jobs, which need a sequence of their own, do not run: Warm and
	// imports that compute a pack fail with ErrBadOptions and Tick leaves
	// its jobs pending. With one sequence the engine's KV cache is not
	// unified (runtime.Options.NSeqMax), which saves llama.cpp's check of
	// 256 x 256 sequence pairs in every llama_decode. Requires
	// NoScheduler; Parallel 0 or 1 (taken as 1), ResidentSeqs 0 or
	// negative (none), and composition off (Compose 0, ComposeRatio nil,
	// ComposeAuto false). Default false.
	OneSequence bool

	// Embedder answers Embed and gives memories vectors for dense
	// retrieval, fused with BM25 in every search (textmem.DefaultQuery's
	// DenseWeight 1): embed/llamaembed for a GGUF embedding model in
	// process. nil: memories get no vectors, and Embed embeds with the
	// served model a request names.
	Embedder embed.Embedder
	// MaxQueue is how many requests may wait for a sequence; one more gets
	// ErrBusy at once. Default 64; negative: none may wait.
	MaxQueue int
	// NoPersist turns off saving a chat turn's KV state as a conversation
	// pack (labelled "conv:<cube>"), which lets the next turn, also after a
	// restart, restore instead of prefill. Default false.
	NoPersist bool
	// MinPersistTokens is the shortest conversation state worth a pack,
	// tokens. Default 128.
	MinPersistTokens int
	// ConvBytes bounds the stored conversation packs of all cubes, bytes of
	// stored blobs: after a write past it, the oldest are deleted (a
	// continued conversation replaces its pack, so live ones are the
	// newest). Tier packs have their own budget (Tiers.KVBytes). Default
	// 256 MiB.
	ConvBytes int64
	// DefaultNumPredict caps generated tokens of a request that sets no
	// limit; 0 means until n_ctx.
	DefaultNumPredict int

	// Conversations shapes the memory chats write by themselves (package
	// convmem): the short-term queue's length, when turns join a session,
	// the session heat that consolidates it into the profile.
	Conversations convmem.Options
	// NoRecord turns turn recording off for every cube (Request.Record
	// and Cube.NoRecord turn it off for one request or cube).
	NoRecord bool
	// NoExtract turns off consolidation jobs on chat turns: sessions are
	// still formed, AddMessages still extracts.
	NoExtract bool

	// Upstream, when set, generates through another server instead of a
	// loaded model, Ollama or OpenAI-compatible (UpstreamOptions.API):
	// memories go into the prompt as text (the same layout), no KV packs,
	// no adapters.
	Upstream *UpstreamOptions

	// Clock is the time of memories, usage, ticks and cube records.
	// Default: the wall clock.
	Clock scheduler.Clock
	// Logger receives logs; nil discards. Library code never prints.
	Logger *slog.Logger
}

// UpstreamOptions configure the text-only upstream backend: an Ollama
// server or an OpenAI-compatible one (package upstream).
type UpstreamOptions = upstream.Options

// DefaultOptions returns Options with every default filled in except Dir
// and Model.
func DefaultOptions() Options {
	return Options{Parallel: 4, ResidentSeqs: 2, TickAfterUses: 16, UsageFlush: 100 * time.Millisecond,
		MaxQueue: 64, MinPersistTokens: 128, ConvBytes: 256 << 20, RAMBytes: 128 << 20, AdapterBytes: 1 << 30, GCInterval: time.Minute}
}

// WithDefaults returns o with every zero field that has a default filled
// in (DefaultOptions), and the text tier's short-term turns hidden from
// prompts and moved turns ranked last in them (Layout).
func (o Options) WithDefaults() Options {
	o.ensureDefaults()
	return o
}

func (o *Options) ensureDefaults() {
	d := DefaultOptions()
	// short-term turns are searchable (OS.Search) but never retrieved into
	// a prompt: the conversation itself carries them
	if !slices.Contains(o.Layout.HideSources, conversation.SourceShortTerm) {
		o.Layout.HideSources = append(slices.Clone(o.Layout.HideSources), conversation.SourceShortTerm)
	}
	// moved turns are retrieved, after the memories a user or an extraction
	// wrote (as OS.Search ranks them)
	if !slices.Contains(o.Layout.LastKinds, conversation.KindTurn) {
		o.Layout.LastKinds = append(slices.Clone(o.Layout.LastKinds), conversation.KindTurn)
	}
	if o.OneSequence {
		// one request sequence, no resident ones (Validate refuses more)
		d.Parallel, d.ResidentSeqs = 1, -1
	}
	if o.Parallel == 0 {
		o.Parallel = d.Parallel
	}
	if o.ChunkAfterUses == 0 {
		o.ChunkAfterUses = 3
	}
	if o.ResidentSeqs == 0 {
		o.ResidentSeqs = d.ResidentSeqs
	}
	if o.ResidentSeqs < 0 {
		o.ResidentSeqs = 0
	}
	if o.TickAfterUses == 0 {
		o.TickAfterUses = d.TickAfterUses
	}
	if o.UsageFlush == 0 {
		o.UsageFlush = d.UsageFlush
	}
	if o.MaxQueue == 0 {
		o.MaxQueue = d.MaxQueue
	} else if o.MaxQueue < 0 {
		o.MaxQueue = 0
	}
	if o.GCInterval == 0 {
		o.GCInterval = d.GCInterval
	}
	if o.ConvBytes == 0 {
		o.ConvBytes = d.ConvBytes
	}
	if o.MinPersistTokens == 0 {
		o.MinPersistTokens = d.MinPersistTokens
	}
	if o.RAMBytes == 0 {
		o.RAMBytes = d.RAMBytes
	}
	if o.AdapterBytes == 0 {
		o.AdapterBytes = d.AdapterBytes
	}
	if o.Clock == nil {
		o.Clock = scheduler.SystemClock()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tiers.Clock == nil {
		o.Tiers.Clock = o.Clock
	}
	if o.Tiers.Logger == nil {
		o.Tiers.Logger = o.Logger
	}
}

// Validate reports every invalid field at once.
func (o Options) Validate() error {
	var errs []error
	if o.Dir == "" {
		errs = append(errs, errors.New("Dir is empty"))
	}
	if o.Model != "" && o.Upstream != nil {
		errs = append(errs, errors.New("Model and Upstream are both set: pick one backend"))
	}
	if u := o.Upstream; u != nil {
		if err := u.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(o.Models) > 0 && o.Model == "" {
		errs = append(errs, errors.New("Models without Model: the first model served is Model (the primary)"))
	}
	if o.Parallel < 0 || o.Parallel > 250 {
		errs = append(errs, fmt.Errorf("Parallel %d not in [0, 250]", o.Parallel))
	}
	if o.ResidentSeqs > 4 {
		errs = append(errs, fmt.Errorf("ResidentSeqs %d > 4", o.ResidentSeqs))
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"ResidentCells", int64(o.ResidentCells)}, {"MinPersistTokens", int64(o.MinPersistTokens)}, {"ConvBytes", o.ConvBytes},
		{"DefaultNumPredict", int64(o.DefaultNumPredict)}, {"RAMBytes", o.RAMBytes}, {"AdapterBytes", o.AdapterBytes},
		{"TickAfterUses", int64(o.TickAfterUses)}, {"MaxModels", int64(o.MaxModels)}, {"ModelBytes", o.ModelBytes}, {"UsageFlush", int64(o.UsageFlush)}, {"GCInterval", int64(o.GCInterval)}} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("%s %d < 0", c.name, c.v))
		}
	}
	if o.Compose < 0 || o.Compose > 1 {
		errs = append(errs, fmt.Errorf("Compose %g not in [0, 1]", o.Compose))
	}
	if o.OneSequence {
		if o.Parallel > 1 {
			errs = append(errs, fmt.Errorf("OneSequence with Parallel %d: one sequence serves one request at a time", o.Parallel))
		}
		if o.ResidentSeqs > 0 {
			errs = append(errs, fmt.Errorf("OneSequence with ResidentSeqs %d: resident packs need sequences of their own", o.ResidentSeqs))
		}
		if o.Compose > 0 || o.ComposeRatio != nil || o.ComposeAuto {
			errs = append(errs, errors.New("OneSequence with composition: it needs scratch sequences"))
		}
		if !o.NoScheduler {
			errs = append(errs, errors.New("OneSequence without NoScheduler: the background loop's tier jobs need a sequence of their own"))
		}
	}
	if o.ChunkAfterUses < 0 {
		errs = append(errs, fmt.Errorf("ChunkAfterUses %d < 0", o.ChunkAfterUses))
	}
	if o.ResidentAt < 0 {
		errs = append(errs, fmt.Errorf("ResidentAt %g < 0", o.ResidentAt))
	}
	if err := o.Tiers.Heat.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := (kvgate.GateOptions{Codec: o.KVCodec, Targets: o.KVGate}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Model != "" {
		e := o.Engine
		e.ModelPath = o.Model
		if err := e.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrBadOptions, errors.Join(errs...))
	}
	return nil
}

// PrimaryName is the name clients see for Model: ModelName, else Model's
// file name without ".gguf".
func (opts Options) PrimaryName() string {
	if opts.ModelName != "" {
		return opts.ModelName
	}
	return strings.TrimSuffix(filepath.Base(opts.Model), ".gguf")
}

// ModelSpec names a GGUF file the OS serves besides Options.Model: listed
// at once, loaded on its first request (Ollama's scheduler does the same).
type ModelSpec struct {
	// Name is what clients call it ("stories:latest", "tiny"). Required,
	// unique among the OS's models.
	Name string
	// Path is the GGUF file. Required.
	Path string
}

// ErrBadOptions wraps every invalid Options field (Validate) and a model
// list that cannot be served.
var ErrBadOptions = errors.New("memosrt: invalid options")
