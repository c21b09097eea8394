package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/pipeline/request"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/upstream"
)

// upstreamBackend generates through an upstream server (Options.Upstream,
// package upstream: Ollama's API or an OpenAI-compatible one): memories
// go into the prompt as text, in the same layout as the llama backend's
// (layout.Layout without tokens); the pipeline holds the request slots
// and records the memories used. No KV packs, no adapters.
type upstreamBackend struct {
	b    upstream.Backend
	pool *slots.Pool
}

func newUpstream(p *Pipeline, uo UpstreamOptions) (*upstreamBackend, error) {
	b, err := upstream.New(uo)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadOptions, err)
	}
	name := p.opts.ModelName
	if name == "" {
		name = uo.Model
	}
	p.info = ModelInfo{Name: name, Backend: b.API(), Modified: time.Now().UTC(),
		Info: map[string]any{"memosrt.backend": b.API(), "memosrt.upstream": uo.URL}}
	return &upstreamBackend{b: b, pool: slots.New(make([]int, p.opts.Parallel), p.opts.MaxQueue, ErrClosed)}, nil
}

// upstreamTurn answers through the upstream (no KV state, no adapters):
// the cube's prompt assembled from the tiers as the llama path assembles
// it (the tools passed as tools, not as a turn), recorded as the llama
// path records it: after a complete answer.
func (p *Pipeline) upstreamTurn(t *turn) (*Response, error) {
	req, ctx := t.req, t.ctx
	api := p.up.b.API()
	if len(req.Adapters) > 0 {
		return nil, badField("adapters", "the %s backend has no LoRA adapters", api)
	}
	out := &Response{ID: req.ID}
	setMemories(out, layout.Prompt{})
	var used *layout.Prompt
	ur := &upstream.Request{Chat: req.Messages != nil, Prompt: req.Prompt, System: req.System, Raw: req.Raw, Context: req.Context,
		NumCtx: req.NumCtx, Stop: req.Stop, Format: req.Format, RenderOnly: req.RenderOnly, NumPredict: req.NumPredict,
		Sampling: upstream.Sampling{Temperature: req.Sampling.Temperature, TopK: req.Sampling.TopK, TopP: req.Sampling.TopP,
			MinP: req.Sampling.MinP, RepeatPenalty: req.Sampling.RepeatPenalty, Seed: req.Sampling.Seed}}
	if ur.NumPredict == 0 && p.opts.DefaultNumPredict > 0 {
		ur.NumPredict = p.opts.DefaultNumPredict
	}
	ur.Tools, ur.ToolChoice, ur.ToolName, ur.MaxToolCalls = req.Tools, req.ToolChoice, req.ToolName, req.MaxToolCalls
	turns := req.Messages
	if turns == nil {
		turns = request.Turns(&Request{System: req.System, Prompt: req.Prompt})
	}
	if req.Cube != "" && !req.Raw && len(req.Context) == 0 {
		members, err := p.tiers.HotSet(ctx, req.Cube)
		if err != nil {
			return nil, err
		}
		shared, err := p.sharedInput(ctx, req)
		if err != nil {
			return nil, err
		}
		pr, err := p.lay.Assemble(ctx, layout.Input{Cube: req.Cube, Members: members, Messages: turns, Shared: shared})
		if err != nil {
			return nil, err
		}
		setMemories(out, pr)
		ur.Messages = append(ur.Messages, layout.Message{Role: "system", Content: pr.System})
		ur.Messages = append(ur.Messages, pr.Messages...)
		if req.Messages == nil {
			// a completion (Ollama): the pack as system text, the retrieved
			// block in the prompt (the last message)
			ur.System = pr.System
			if req.System != "" {
				ur.System += "\n" + req.System
			}
		}
		used = &pr
	} else {
		ur.Messages = req.Messages
	}
	sl, _, err := p.up.pool.Acquire(ctx, nil, "")
	if err != nil {
		return nil, err
	}
	defer p.up.pool.Release(sl)
	var firstText time.Time
	ur.OnText = func(s string) error {
		if firstText.IsZero() {
			firstText = time.Now()
			out.Usage.TTFT = firstText.Sub(t.start)
		}
		if req.OnText != nil {
			return req.OnText(s)
		}
		return nil
	}
	if req.OnText == nil && api == upstream.APIOpenAI {
		ur.OnText = nil // one JSON answer, not a stream
	}
	r, err := p.up.b.Generate(ctx, ur)
	if r != nil {
		out.Text, out.ToolCalls, out.DoneReason, out.Rendered = r.Text, r.ToolCalls, r.DoneReason, r.Rendered
		if len(r.ToolCalls) > 0 {
			out.Text = ""
		}
		out.Context = r.Context
		out.Usage.PromptTokens, out.Usage.CachedTokens, out.Usage.EvalTokens = r.PromptTokens, r.CachedTokens, r.EvalTokens
		out.Usage.PromptDuration, out.Usage.EvalDuration = r.PromptDuration, r.EvalDuration
		out.Usage.LoadDuration = max(r.LoadDuration, time.Nanosecond) // upstream's, always reported as Ollama does
	}
	if err != nil {
		return out, err
	}
	switch {
	case !firstText.IsZero():
		out.Usage.EvalDuration = time.Since(firstText)
	case out.Text != "" || len(out.ToolCalls) > 0:
		// one JSON answer (openai, not streamed): its text arrived now
		out.Usage.TTFT = time.Since(t.start)
	}
	out.Usage.TotalDuration = time.Since(t.start)
	if used != nil && !req.NoUsage {
		p.recordUse(req.Cube, *used)
	}
	p.answered(t.ctx, req, t.cube, out, t.background)
	if t.chat {
		p.chatDone(t.ctx, req, t.cube, out.Text, t.background)
	}
	return out, nil
}

// embed embeds texts through the upstream with its embedding model, in a
// request slot.
func (u *upstreamBackend) embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	sl, _, err := u.pool.Acquire(ctx, nil, "")
	if err != nil {
		return nil, 0, err
	}
	defer u.pool.Release(sl)
	return u.b.Embed(ctx, texts)
}
