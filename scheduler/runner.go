package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
)

// DefaultPreamble opens every pack.
const DefaultPreamble = "You are a helpful assistant. What you remember about the user:"

// Options configure a Runner. Zero means the default given.
type Options struct {
	// Preamble is the system text before the memories. Default DefaultPreamble.
	Preamble string
	// MaxPackTokens bounds a cube's pack, in tokens. Default n_ctx/2.
	MaxPackTokens int
	// RetrieveK is how many memories outside the pack retrieval may add. Default 5.
	RetrieveK int
	// ChatTemplate overrides the model's template ("" uses the model's; a
	// model without one gets the plain layout described at Build).
	ChatTemplate string
	// PackMembers, if set, gives the memories that form a cube's pack, in
	// pack order (Tiers.HotSet: the activation tier's hot set). Default: all
	// of the cube's memories in canonical order.
	PackMembers func(ctx context.Context, cube string) ([]textmem.Memory, error)
	// Logger for warnings; nil discards.
	Logger *slog.Logger
}

// Runner builds prompts from the tiers and generates.
type Runner struct {
	eng  *runtime.Engine
	mem  *textmem.Store
	kv   *kvcache.Cache
	opts Options
	log  *slog.Logger
}

// New returns a Runner over an engine, a text store and a KV cache (kv may be
// nil: no activation tier).
func New(eng *runtime.Engine, mem *textmem.Store, kv *kvcache.Cache, opts Options) *Runner {
	if opts.Preamble == "" {
		opts.Preamble = DefaultPreamble
	}
	if opts.MaxPackTokens == 0 {
		opts.MaxPackTokens = eng.NCtx() / 2
	}
	if opts.RetrieveK == 0 {
		opts.RetrieveK = 5
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{eng: eng, mem: mem, kv: kv, opts: opts, log: log}
}

// Prompt is an assembled prompt: Tokens = PackTokens followed by the rest.
type Prompt struct {
	PackTokens []int32          // the cube's pack: preamble + pack memories
	Tokens     []int32          // whole prompt
	Pack       []textmem.Memory // memories inside the pack, canonical order
	Retrieved  []textmem.Memory // memories added after the pack by retrieval
}

func (r *Runner) template() string {
	if r.opts.ChatTemplate != "" {
		return r.opts.ChatTemplate
	}
	return r.eng.Model().ChatTemplate()
}

func bullet(m textmem.Memory) string {
	return "- " + strings.ReplaceAll(strings.TrimSpace(m.Text), "\n", " ") + "\n"
}

// packText renders the system part: preamble, then one line per memory.
func (r *Runner) packText(mems []textmem.Memory) string {
	var b strings.Builder
	b.WriteString(r.opts.Preamble)
	b.WriteString("\n")
	for _, m := range mems {
		b.WriteString(bullet(m))
	}
	return b.String()
}

// Build assembles the prompt for query in cube: BuildPack with the pack
// members given by Options.PackMembers, or by default the cube's memories in
// canonical order (creation time, then id). See BuildPack for the layout.
func (r *Runner) Build(ctx context.Context, cube, query string) (Prompt, error) {
	members, err := r.members(ctx, cube)
	if err != nil {
		return Prompt{}, err
	}
	return r.BuildPack(ctx, cube, query, members)
}

func (r *Runner) members(ctx context.Context, cube string) ([]textmem.Memory, error) {
	if r.opts.PackMembers != nil {
		return r.opts.PackMembers(ctx, cube)
	}
	return r.mem.List(ctx, cube)
}

// Warm computes and stores the pack of cube in the activation tier.
func (r *Runner) Warm(ctx context.Context, cube string, seq int) (kvcache.Info, Prompt, error) {
	if r.kv == nil {
		return kvcache.Info{}, Prompt{}, errors.New("scheduler: no KV cache")
	}
	p, err := r.Build(ctx, cube, "")
	if err != nil {
		return kvcache.Info{}, p, err
	}
	info, err := r.kv.Warm(ctx, r.eng, seq, p.PackTokens, kvcache.WarmOptions{Label: cube, Scope: cube})
	return info, p, err
}

// RunRequest is one generation in a cube.
type RunRequest struct {
	Cube      string
	Prompt    string
	Seq       int
	Sampling  llama.SamplerParams
	MaxTokens int
	Stop      []string
	// NoCache skips the activation tier: plain prefill of the whole prompt.
	NoCache bool
	// WarmOnMiss stores the pack when no cached prefix was found.
	WarmOnMiss bool
	// Adapters is the LoRA set (nil: none); packs are only reused under the
	// same set and scales.
	Adapters []runtime.AdapterRef
	OnText   func(string) error
}

// RunResult reports a generation.
type RunResult struct {
	runtime.Result
	Restored kvcache.Restored
	Prompt   Prompt
}

// Run builds the prompt, restores the longest cached prefix (unless
// NoCache), decodes the rest and generates: RunPack with the members of
// Build. TTFT counts from the call, retrieval and restore included.
func (r *Runner) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	members, err := r.members(ctx, req.Cube)
	if err != nil {
		return RunResult{}, err
	}
	return r.RunPack(ctx, req, members)
}
