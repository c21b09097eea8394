package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
)

// BuildPack is Build with the pack's members given: the pack holds members
// in the given order while they fit MaxPackTokens (members == nil: an empty
// pack, the preamble alone), retrieval adds up to RetrieveK other memories of
// the cube before the query. Build is BuildPack with every memory of the
// cube in canonical order; Tiers passes its hot set (promotion order, so a
// promotion appends to the pack and extends its KV incrementally).
func (r *Runner) BuildPack(ctx context.Context, cube, query string, members []textmem.Memory) (Prompt, error) {
	var p Prompt
	inPack := map[string]bool{}
	budget := r.opts.MaxPackTokens
	if t, err := r.eng.Tokenize(r.opts.Preamble, true); err == nil {
		budget -= len(t)
	}
	for _, m := range members {
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
	if query != "" {
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
	var err error
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

// RunPack is Run with the pack's members given (see BuildPack).
func (r *Runner) RunPack(ctx context.Context, req RunRequest, members []textmem.Memory) (RunResult, error) {
	start := time.Now()
	defer r.eng.BeginForeground()() // restore and generate ahead of background work
	var out RunResult
	p, err := r.BuildPack(ctx, req.Cube, req.Prompt, members)
	if err != nil {
		return out, err
	}
	out.Prompt = p
	npast := 0
	if r.kv != nil && !req.NoCache {
		rs, err := r.kv.Restore(ctx, r.eng, req.Seq, p.Tokens, kvcache.RestoreOptions{AdapterKey: runtime.AdapterKey(req.Adapters), Scope: req.Cube})
		if err != nil {
			return out, err
		}
		out.Restored = rs
		npast = rs.Tokens
		if npast == 0 && req.WarmOnMiss && len(p.PackTokens) > 0 {
			if _, err := r.kv.Warm(ctx, r.eng, req.Seq, p.PackTokens, kvcache.WarmOptions{Adapters: req.Adapters, Label: req.Cube, Scope: req.Cube}); err != nil {
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
