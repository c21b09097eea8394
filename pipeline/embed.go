package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/pipeline/request"
)

// embedChunk is how many texts the engine embeds per lock of its context.
const embedChunk = 16

// Embed returns one vector per text, [len(texts)][dim]float32, and the
// input's token count: Options.Embedder when set, else the loaded model
// (runtime.Engine.Embed: pooled as the model says, mean otherwise,
// L2-normalized, in chunks of 16 texts so generation interleaves), else
// the upstream's embedding model. Every vector is checked (embed.Valid).
// Errors: *FieldError beyond MaxEmbedInputs texts, ErrNoModel,
// embed.ErrBadVector, embed.ErrShape, the embedder's errors.
func (p *Pipeline) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	e, err := p.EmbedWith(ctx, "", nil, texts)
	return e.Vectors, e.Tokens, err
}

// HasEmbedder reports whether Options.Embedder embeds (then the model
// named in an embedding request does not matter).
func (p *Pipeline) HasEmbedder() bool { return p.opts.Embedder != nil }

// EmbedWith is Embed with model name ("" the primary) when no Embedder is
// set; the model is loaded first if needed and stays keep after it (nil:
// Options.KeepAlive), as Request.KeepAlive. It returns the vectors, the
// token count and the load time (request.Embedding). Errors as Embed, and
// ErrModelNotFound.
func (p *Pipeline) EmbedWith(ctx context.Context, model string, keep *time.Duration, texts []string) (request.Embedding, error) {
	if len(texts) > request.MaxEmbedInputs {
		return request.Embedding{}, badField("input", "%d inputs, at most %d per request", len(texts), request.MaxEmbedInputs)
	}
	var vecs [][]float32
	var err error
	var l *loaded
	var load time.Duration
	if p.opts.Embedder == nil && p.models.Len() > 0 {
		var release func()
		asked := time.Now()
		if l, release, err = p.use(ctx, model, keep); err != nil {
			return request.Embedding{}, err
		}
		defer release()
		load = max(time.Since(asked), time.Nanosecond)
	}
	n := 0
	switch {
	case p.up != nil && p.opts.Embedder == nil:
		vecs, n, err = p.up.embed(ctx, texts)
	case p.opts.Embedder != nil:
		vecs, err = p.opts.Embedder.Embed(ctx, texts)
	case l != nil:
		// in chunks: the engine lock is held for one chunk at a time, so
		// generation steps interleave with a long list
		for i := 0; i < len(texts) && err == nil; i += embedChunk {
			var v [][]float32
			if v, err = l.eng.Embed(ctx, texts[i:min(len(texts), i+embedChunk)]); err == nil {
				vecs = append(vecs, v...)
			}
		}
	default:
		return request.Embedding{}, ErrNoModel
	}
	if err != nil {
		return request.Embedding{}, err
	}
	if len(vecs) != len(texts) {
		return request.Embedding{}, fmt.Errorf("%w: %d vectors for %d texts", embed.ErrShape, len(vecs), len(texts))
	}
	for i, v := range vecs {
		if err := embed.Valid(v); err != nil {
			return request.Embedding{}, fmt.Errorf("memosrt: input %d: %w", i, err)
		}
	}
	if l != nil {
		for _, t := range texts {
			if toks, err := l.eng.Tokenize(t, false); err == nil {
				n += len(toks)
			}
		}
	}
	return request.Embedding{Vectors: vecs, Tokens: n, LoadDuration: max(load, time.Nanosecond)}, nil
}
