package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ollama/ollama/api"
)

// ollama is an Ollama server through the official client
// github.com/ollama/ollama/api: /api/chat for chats, /api/generate for
// completions, /api/embed. Every sampling option is passed (temperature,
// seed, top_k, top_p, min_p, repeat_penalty, num_predict, stop, num_ctx),
// and the format as is; tools are refused.
type ollama struct {
	opts Options
	c    *api.Client
}

func newOllama(o Options) *ollama {
	u, _ := url.Parse(o.URL) // Validate parsed it
	return &ollama{opts: o, c: api.NewClient(u, &http.Client{Timeout: o.Timeout})}
}

func (b *ollama) API() string { return APIOllama }

// ollamaErr maps a client error: the upstream's statuses as statusErr
// maps them, a cancellation as itself, the rest ErrUpstream.
func ollamaErr(err error) error {
	var se api.StatusError
	if errors.As(err, &se) {
		return statusErr(APIOllama, se.StatusCode, se.ErrorMessage)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUpstream, err)
}

func (b *ollama) options(req *Request) map[string]any {
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
	}
	if len(req.Stop) > 0 {
		m["stop"] = req.Stop
	}
	if req.NumCtx > 0 {
		m["num_ctx"] = req.NumCtx
	}
	return m
}

// Generate answers req through /api/chat (req.Chat) or /api/generate
// (a completion: its last message is the prompt when the pipeline
// assembled messages).
func (b *ollama) Generate(ctx context.Context, req *Request) (*Result, error) {
	if len(req.Tools) > 0 {
		return nil, badField("tools", "tools are not supported with the ollama backend")
	}
	out := &Result{}
	var msgs []api.Message
	for _, m := range req.Messages {
		msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
	}
	stream := true
	done := false
	var text strings.Builder
	emit := func(t string) error {
		if t == "" {
			return nil
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
		out.PromptTokens, out.EvalTokens = m.PromptEvalCount, m.EvalCount
		out.PromptDuration, out.EvalDuration, out.LoadDuration = m.PromptEvalDuration, m.EvalDuration, m.LoadDuration
		if dbg != nil {
			out.Rendered = dbg.RenderedTemplate
		}
	}
	var err error
	if req.Chat {
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
		if len(msgs) > 0 && !req.Raw {
			prompt = msgs[len(msgs)-1].Content // the prompt with the retrieved block
		}
		var hist []int
		for _, t := range req.Context {
			hist = append(hist, int(t))
		}
		err = b.c.Generate(ctx, &api.GenerateRequest{Model: b.opts.Model, Prompt: prompt, System: req.System, Raw: req.Raw,
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
			return out, context.Cause(ctx)
		}
		return out, ollamaErr(err)
	}
	if !done {
		// The client stops without an error when a line exceeds its 8 MiB
		// buffer (bufio.ErrTooLong is dropped): never pass that off as a
		// complete answer.
		return out, fmt.Errorf("%w: stream from %s ended without its final message (a response line over the client's 8 MiB limit?)", ErrUpstream, b.opts.URL)
	}
	if out.DoneReason == "" {
		out.DoneReason = "stop"
	}
	return out, nil
}

// Embed embeds texts through /api/embed with Options.EmbedModel.
func (b *ollama) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	res, err := b.c.Embed(ctx, &api.EmbedRequest{Model: b.opts.EmbedModel, Input: texts})
	if err != nil {
		return nil, 0, ollamaErr(err)
	}
	if len(res.Embeddings) != len(texts) {
		return nil, 0, fmt.Errorf("%w: %d embeddings for %d inputs", ErrUpstream, len(res.Embeddings), len(texts))
	}
	return res.Embeddings, res.PromptEvalCount, nil
}
