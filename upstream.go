package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/ollama/ollama/api"
)

// UseOllama attaches the text-only fallback backend: memories go into the
// prompt as text (a system turn) and generation goes through the official
// client to an Ollama-compatible server. KV packs are not available.
func (s *Server) UseOllama(o OllamaOptions) error {
	u, err := url.Parse(o.URL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("%w: Ollama URL %q is not an absolute URL", ErrBadOptions, o.URL)
	}
	if o.Model == "" {
		return fmt.Errorf("%w: Ollama Model is empty", ErrBadOptions)
	}
	if o.EmbedModel == "" {
		o.EmbedModel = o.Model
	}
	if o.Name == "" {
		o.Name = o.Model
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.MaxMemoryBytes <= 0 {
		o.MaxMemoryBytes = 32 << 10
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Minute
	}
	b := &ollamaBackend{s: s, o: o, c: api.NewClient(u, &http.Client{Timeout: o.Timeout}),
		pool: newSlotPool(make([]int, o.Parallel), s.opts.MaxQueue)}
	b.info = modelInfo{Name: o.Name, Modified: time.Now().UTC(), Info: map[string]any{"memosrt.backend": "ollama", "memosrt.upstream": o.URL}}
	if err := s.attach(b); err != nil {
		return err
	}
	s.log.Info("ollama backend ready", "url", o.URL, "model", o.Model)
	return nil
}

// ollamaBackend forwards generation to an Ollama server.
type ollamaBackend struct {
	s    *Server
	o    OllamaOptions
	c    *api.Client
	pool *slotPool
	info modelInfo
}

func (b *ollamaBackend) model() modelInfo { return b.info }

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
			return fmt.Errorf("%w: upstream: %s", errModelNotFound, se.ErrorMessage)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUpstream, err)
}

func (b *ollamaBackend) options(req *genRequest) map[string]any {
	p := req.Sampling
	o := map[string]any{"temperature": p.Temperature, "seed": int(p.Seed)}
	if p.TopK > 0 {
		o["top_k"] = p.TopK
	}
	if p.TopP > 0 {
		o["top_p"] = p.TopP
	}
	if p.MinP > 0 {
		o["min_p"] = p.MinP
	}
	if p.RepeatPenalty > 0 {
		o["repeat_penalty"] = p.RepeatPenalty
	}
	if req.NumPredict > 0 {
		o["num_predict"] = req.NumPredict
	} else if b.s.opts.DefaultNumPredict > 0 {
		o["num_predict"] = b.s.opts.DefaultNumPredict
	}
	if len(req.Stop) > 0 {
		o["stop"] = req.Stop
	}
	if req.NumCtx > 0 {
		o["num_ctx"] = req.NumCtx
	}
	return o
}

func (b *ollamaBackend) generate(ctx context.Context, req *genRequest) (genResult, error) {
	var out genResult
	if len(req.Adapters) > 0 {
		return out, badField("adapters", "the ollama backend has no LoRA adapters")
	}
	mem, nMem := "", 0
	if req.Cube != "" && !req.Raw {
		var err error
		mem, nMem, err = textMemories(ctx, b.s.opts.Store, req.Cube, req.query(), b.o.MaxMemoryBytes, 5)
		if err != nil {
			return out, err
		}
	}
	out.Memories = nMem
	sl, _, err := b.pool.acquire(ctx, nil, "")
	if err != nil {
		return out, err
	}
	defer b.pool.release(sl)
	stream := true
	done := false
	var firstText time.Time
	onText := func(t string) error {
		if t == "" {
			return nil
		}
		if firstText.IsZero() {
			firstText = time.Now()
			out.TTFT = firstText.Sub(req.Start)
		}
		out.Text += t
		if req.OnText != nil {
			return req.OnText(t)
		}
		return nil
	}
	final := func(m api.Metrics, reason string, dbg *api.DebugInfo) {
		done = true
		out.DoneReason = reason
		out.PromptTokens, out.EvalTokens = m.PromptEvalCount, m.EvalCount
		out.PromptTime, out.EvalTime = m.PromptEvalDuration, m.EvalDuration
		if dbg != nil {
			out.Rendered = dbg.RenderedTemplate
		}
	}
	if req.Messages != nil {
		var msgs []api.Message
		if mem != "" {
			msgs = append(msgs, api.Message{Role: "system", Content: mem})
		}
		for _, m := range req.Messages {
			msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
		}
		err = b.c.Chat(ctx, &api.ChatRequest{Model: b.o.Model, Messages: msgs, Stream: &stream, Options: b.options(req),
			Format: req.Format, DebugRenderOnly: req.RenderOnly}, func(r api.ChatResponse) error {
			if err := onText(r.Message.Content); err != nil {
				return err
			}
			if r.Done {
				final(r.Metrics, r.DoneReason, r.DebugInfo)
			}
			return nil
		})
	} else {
		sys := req.System
		if mem != "" {
			sys = mem + "\n" + sys
		}
		var hist []int
		for _, t := range req.Context {
			hist = append(hist, int(t))
		}
		err = b.c.Generate(ctx, &api.GenerateRequest{Model: b.o.Model, Prompt: req.Prompt, System: sys, Raw: req.Raw,
			Context: hist, Stream: &stream, Options: b.options(req), Format: req.Format, DebugRenderOnly: req.RenderOnly},
			func(r api.GenerateResponse) error {
				if err := onText(r.Response); err != nil {
					return err
				}
				if r.Done {
					final(r.Metrics, r.DoneReason, r.DebugInfo)
					out.Context = r.Context
				}
				return nil
			})
	}
	if err != nil {
		if ctx.Err() != nil {
			return out, context.Cause(ctx)
		}
		return out, upstreamErr(err)
	}
	if !done {
		// The client stops without an error when a line exceeds its 8 MiB
		// buffer (bufio.ErrTooLong is dropped): never pass that off as a
		// complete answer.
		return out, fmt.Errorf("%w: stream from %s ended without its final message (a response line over the client's 8 MiB limit?)", ErrUpstream, b.o.URL)
	}
	if out.DoneReason == "" {
		out.DoneReason = "stop"
	}
	if !firstText.IsZero() {
		out.EvalTime = time.Since(firstText)
	}
	return out, nil
}

func (b *ollamaBackend) embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	sl, _, err := b.pool.acquire(ctx, nil, "")
	if err != nil {
		return nil, 0, err
	}
	defer b.pool.release(sl)
	if b.s.opts.Embedder != nil {
		v, err := b.s.opts.Embedder.Embed(ctx, texts)
		return v, 0, err
	}
	res, err := b.c.Embed(ctx, &api.EmbedRequest{Model: b.o.EmbedModel, Input: texts})
	if err != nil {
		return nil, 0, upstreamErr(err)
	}
	if len(res.Embeddings) != len(texts) {
		return nil, 0, fmt.Errorf("%w: %d embeddings for %d inputs", ErrUpstream, len(res.Embeddings), len(texts))
	}
	return res.Embeddings, res.PromptEvalCount, nil
}

func (b *ollamaBackend) warm(ctx context.Context, cube string, resident bool) (packStatus, error) {
	return packStatus{}, fmt.Errorf("%w: the ollama backend is text-only (no KV packs)", ErrNotSupported)
}

func (b *ollamaBackend) packs(cube string) (packStatus, error) {
	return packStatus{Cube: cube, Packs: []packInfo{}}, nil
}

func (b *ollamaBackend) dropCube(string) {}

func (b *ollamaBackend) stats() backendStats {
	return backendStats{Kind: "ollama", Slots: b.pool.size(), BusySlots: b.pool.busy(), Queued: b.pool.queued()}
}

func (b *ollamaBackend) close(context.Context) error { return nil }
