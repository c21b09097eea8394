package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

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

// Build assembles the prompt for query in cube. The pack holds the cube's
// memories in canonical order (creation time, then id) while they fit
// MaxPackTokens; retrieval (text-tier search) adds up to RetrieveK memories
// outside the pack just before the query. With a chat template the pack is
// the rendered system turn; without one the layout is
// "<preamble>\n- m1\n- m2\n" then "\n<retrieved lines>\n<query>".
// The pack and the rest are tokenized separately, so the pack's tokens are
// a prefix of every prompt of the cube whatever the query.
func (r *Runner) Build(ctx context.Context, cube, query string) (Prompt, error) {
	var p Prompt
	all, err := r.mem.List(ctx, cube)
	if err != nil {
		return p, err
	}
	// pack: memories in canonical order while they fit
	inPack := map[string]bool{}
	budget := r.opts.MaxPackTokens
	if t, err := r.eng.Tokenize(r.opts.Preamble, true); err == nil {
		budget -= len(t)
	}
	for _, m := range all {
		t, err := r.eng.Tokenize(bullet(m), false)
		if err != nil {
			return p, err
		}
		if len(t) > budget {
			break
		}
		budget -= len(t)
		p.Pack = append(p.Pack, m)
		inPack[m.ID] = true
	}
	if query != "" && len(p.Pack) < len(all) {
		hits, err := r.mem.Search(ctx, cube, query, r.opts.RetrieveK+len(p.Pack))
		if err != nil {
			return p, err
		}
		for _, h := range hits {
			if !inPack[h.Memory.ID] && len(p.Retrieved) < r.opts.RetrieveK {
				p.Retrieved = append(p.Retrieved, h.Memory)
			}
		}
	}
	system := r.packText(p.Pack)
	var rest strings.Builder
	if len(p.Retrieved) > 0 {
		rest.WriteString("Also relevant:\n")
		for _, m := range p.Retrieved {
			rest.WriteString(bullet(m))
		}
	}
	userText := rest.String() + query

	packStr, restStr := system, "\n"+userText
	if tmpl := r.template(); tmpl != "" {
		full, err1 := r.eng.Model().ApplyChatTemplate(tmpl, []llama.ChatMessage{{Role: "system", Content: system}, {Role: "user", Content: userText}}, true)
		sys, err2 := r.eng.Model().ApplyChatTemplate(tmpl, []llama.ChatMessage{{Role: "system", Content: system}}, false)
		if err := errors.Join(err1, err2); err != nil {
			return p, err
		}
		if !strings.HasPrefix(full, sys) {
			return p, fmt.Errorf("scheduler: chat template does not render the system turn as a prefix")
		}
		packStr, restStr = sys, full[len(sys):]
	}
	if p.PackTokens, err = r.eng.Tokenize(packStr, true); err != nil {
		return p, err
	}
	restToks, err := r.eng.Tokenize(restStr, false)
	if err != nil {
		return p, err
	}
	p.Tokens = append(append([]int32{}, p.PackTokens...), restToks...)
	return p, nil
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
	info, err := r.kv.Warm(ctx, r.eng, seq, p.PackTokens, kvcache.WarmOptions{Label: cube})
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
// NoCache), decodes the rest and generates. TTFT counts from the call,
// retrieval and restore included.
func (r *Runner) Run(ctx context.Context, req RunRequest) (RunResult, error) {
	start := time.Now()
	var out RunResult
	p, err := r.Build(ctx, req.Cube, req.Prompt)
	if err != nil {
		return out, err
	}
	out.Prompt = p
	npast := 0
	if r.kv != nil && !req.NoCache {
		rs, err := r.kv.Restore(ctx, r.eng, req.Seq, p.Tokens, runtime.AdapterKey(req.Adapters))
		if err != nil {
			return out, err
		}
		out.Restored = rs
		npast = rs.Tokens
		if npast == 0 && req.WarmOnMiss && len(p.PackTokens) > 0 {
			if _, err := r.kv.Warm(ctx, r.eng, req.Seq, p.PackTokens, kvcache.WarmOptions{Adapters: req.Adapters, Label: req.Cube}); err != nil {
				return out, err
			}
			npast = len(p.PackTokens)
		}
	} else if err := r.eng.ClearSeq(req.Seq); err != nil {
		return out, err
	}
	res, err := r.eng.Generate(ctx, runtime.Request{Seq: req.Seq, Tokens: p.Tokens, NPast: npast,
		Sampling: req.Sampling, MaxTokens: req.MaxTokens, Stop: req.Stop, OnText: req.OnText, Start: start,
		Adapters: req.Adapters})
	res.CachedTokens = out.Restored.Tokens
	out.Result = res
	return out, err
}
