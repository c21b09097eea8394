package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ollama/ollama/api"

	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/runtime/slots"
)

// upstream generates through an Ollama server (Options.Upstream): memories
// go into the prompt as text, in the same layout as the llama backend's
// (layout.Layout without tokens), and generation goes through the
// official client github.com/ollama/ollama/api. No KV packs, no adapters.
type upstream struct {
	p    *Pipeline
	opts UpstreamOptions
	c    *api.Client
	pool *slots.Pool
}

func newUpstream(p *Pipeline, uo UpstreamOptions) (*upstream, error) {
	u, err := url.Parse(uo.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("%w: Upstream URL %q is not an absolute URL", ErrBadOptions, uo.URL)
	}
	if uo.EmbedModel == "" {
		uo.EmbedModel = uo.Model
	}
	if uo.Timeout <= 0 {
		uo.Timeout = 10 * time.Minute
	}
	name := p.opts.ModelName
	if name == "" {
		name = uo.Model
	}
	p.info = ModelInfo{Name: name, Backend: "ollama", Modified: time.Now().UTC(),
		Info: map[string]any{"memosrt.backend": "ollama", "memosrt.upstream": uo.URL}}
	return &upstream{p: p, opts: uo, c: api.NewClient(u, &http.Client{Timeout: uo.Timeout}),
		pool: slots.New(make([]int, p.opts.Parallel), p.opts.MaxQueue, ErrClosed)}, nil
}

// upstreamErr maps a client error: the upstream's 4xx statuses keep their
// meaning, the rest is ErrUpstream.
func upstreamErr(err error) error {
	var se api.StatusError
	if errors.As(err, &se) {
		switch {
		case se.StatusCode == http.StatusTooManyRequests:
			return fmt.Errorf("%w: upstream: %s", ErrBusy, se.ErrorMessage)
		case se.StatusCode == http.StatusBadRequest:
			return badField("upstream", "%s", se.ErrorMessage)
		case se.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%w: upstream: %s", ErrModelNotFound, se.ErrorMessage)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUpstream, err)
}

func (b *upstream) options(req *Request) map[string]any {
	p := req.Sampling
	m := map[string]any{"temperature": p.Temperature, "seed": int(p.Seed)}
	if p.TopK > 0 {
		m["top_k"] = p.TopK
	}
	if p.TopP > 0 {
		m["top_p"] = p.TopP
	}
	if p.MinP > 0 {
		m["min_p"] = p.MinP
	}
	if p.RepeatPenalty > 0 {
		m["repeat_penalty"] = p.RepeatPenalty
	}
	if req.NumPredict != 0 {
		m["num_predict"] = req.NumPredict // -1, -2: Ollama's own meanings
	} else if b.p.opts.DefaultNumPredict > 0 {
		m["num_predict"] = b.p.opts.DefaultNumPredict
	}
	if len(req.Stop) > 0 {
		m["stop"] = req.Stop
	}
	if req.NumCtx > 0 {
		m["num_ctx"] = req.NumCtx
	}
	return m
}

// generate answers req through the upstream Ollama, with the cube's
// prompt assembled from the tiers as the llama path assembles it; it
// returns that prompt (nil without a cube) for the pipeline to record its
// use, as the llama path's, once the answer is complete.
func (b *upstream) generate(ctx context.Context, req *Request, start time.Time) (*Response, *layout.Prompt, error) {
	out := &Response{}
	out.setMemories(layout.Prompt{})
	var used *layout.Prompt
	if len(req.Adapters) > 0 {
		return nil, nil, badField("adapters", "the ollama backend has no LoRA adapters")
	}
	var msgs []api.Message
	sys := req.System
	if req.Cube != "" && !req.Raw && len(req.Context) == 0 {
		members, err := b.p.tiers.HotSet(ctx, req.Cube)
		if err != nil {
			return nil, nil, err
		}
		p, err := b.p.lay.Assemble(ctx, layout.Input{Cube: req.Cube, Members: members, Messages: requestTurns(req)})
		if err != nil {
			return nil, nil, err
		}
		out.setMemories(p)
		msgs = append(msgs, api.Message{Role: "system", Content: p.System})
		for _, m := range p.Messages {
			msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
		}
		if req.Messages == nil {
			// a completion: the pack as system text, retrieved block in the prompt
			sys = p.System
			if req.System != "" {
				sys += "\n" + req.System
			}
		}
		used = &p
	} else {
		for _, m := range req.Messages {
			msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
		}
	}
	sl, _, err := b.pool.Acquire(ctx, nil, "")
	if err != nil {
		return nil, nil, err
	}
	defer b.pool.Release(sl)
	stream := true
	done := false
	var firstText time.Time
	var text strings.Builder
	emit := func(t string) error {
		if t == "" {
			return nil
		}
		if firstText.IsZero() {
			firstText = time.Now()
			out.Usage.TTFT = firstText.Sub(start)
		}
		text.WriteString(t)
		if req.OnText != nil {
			return req.OnText(t)
		}
		return nil
	}
	final := func(m api.Metrics, reason string, dbg *api.DebugInfo) {
		done = true
		out.DoneReason = reason
		out.Usage.PromptTokens, out.Usage.EvalTokens = m.PromptEvalCount, m.EvalCount
		out.Usage.PromptDuration, out.Usage.EvalDuration = m.PromptEvalDuration, m.EvalDuration
		out.Usage.LoadDuration = max(m.LoadDuration, time.Nanosecond) // upstream's, always reported as Ollama does
		if dbg != nil {
			out.Rendered = dbg.RenderedTemplate
		}
	}
	if req.Messages != nil {
		err = b.c.Chat(ctx, &api.ChatRequest{Model: b.opts.Model, Messages: msgs, Stream: &stream, Options: b.options(req),
			Format: req.Format, DebugRenderOnly: req.RenderOnly}, func(r api.ChatResponse) error {
			if err := emit(r.Message.Content); err != nil {
				return err
			}
			if r.Done {
				final(r.Metrics, r.DoneReason, r.DebugInfo)
			}
			return nil
		})
	} else {
		prompt := req.Prompt
		if len(msgs) > 0 && req.Cube != "" && !req.Raw {
			prompt = msgs[len(msgs)-1].Content // the prompt with the retrieved block
		}
		var hist []int
		for _, t := range req.Context {
			hist = append(hist, int(t))
		}
		err = b.c.Generate(ctx, &api.GenerateRequest{Model: b.opts.Model, Prompt: prompt, System: sys, Raw: req.Raw,
			Context: hist, Stream: &stream, Options: b.options(req), Format: req.Format, DebugRenderOnly: req.RenderOnly},
			func(r api.GenerateResponse) error {
				if err := emit(r.Response); err != nil {
					return err
				}
				if r.Done {
					final(r.Metrics, r.DoneReason, r.DebugInfo)
					for _, t := range r.Context {
						out.Context = append(out.Context, int32(t))
					}
				}
				return nil
			})
	}
	out.Text = text.String()
	if err != nil {
		if ctx.Err() != nil {
			return out, nil, context.Cause(ctx)
		}
		return out, nil, upstreamErr(err)
	}
	if !done {
		// The client stops without an error when a line exceeds its 8 MiB
		// buffer (bufio.ErrTooLong is dropped): never pass that off as a
		// complete answer.
		return out, nil, fmt.Errorf("%w: stream from %s ended without its final message (a response line over the client's 8 MiB limit?)", ErrUpstream, b.opts.URL)
	}
	if out.DoneReason == "" {
		out.DoneReason = "stop"
	}
	if !firstText.IsZero() {
		out.Usage.EvalDuration = time.Since(firstText)
	}
	out.Usage.TotalDuration = time.Since(start)
	return out, used, nil
}

func (b *upstream) embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	sl, _, err := b.pool.Acquire(ctx, nil, "")
	if err != nil {
		return nil, 0, err
	}
	defer b.pool.Release(sl)
	if b.p.opts.Embedder != nil {
		v, err := b.p.opts.Embedder.Embed(ctx, texts)
		return v, 0, err
	}
	res, err := b.c.Embed(ctx, &api.EmbedRequest{Model: b.opts.EmbedModel, Input: texts})
	if err != nil {
		return nil, 0, upstreamErr(err)
	}
	if len(res.Embeddings) != len(texts) {
		return nil, 0, fmt.Errorf("%w: %d embeddings for %d inputs", ErrUpstream, len(res.Embeddings), len(texts))
	}
	return res.Embeddings, res.PromptEvalCount, nil
}
