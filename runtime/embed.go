package runtime

import (
	"context"

	"github.com/memosrt/memosrt/runtime/embedding"
)

// ErrNoEmbedding is returned when the model yields no pooled embedding.
var ErrNoEmbedding = embedding.ErrNoEmbedding

// EmbedMaxTokens bounds one text's tokens for Embed; longer texts are
// truncated (Ollama's /api/embed truncates by default too).
const EmbedMaxTokens = embedding.DefaultMaxTokens

// Embed returns one L2-normalized embedding ([n_embd]float32) per text,
// computed by an embedding.Encoder in a second llama context on the same
// model: the model's pooling (mean when the model names none, as for
// decoder models). Texts are truncated to EmbedMaxTokens tokens (or the
// training context, if shorter). The embedding context is created on first
// use and freed by Close. Errors: ErrClosed, embedding.ErrPooling (a
// reranker), and embedding.Encoder.Embed's.
func (e *Engine) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	defer e.BeginForeground()()
	if err := e.lock(); err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	if e.enc == nil {
		enc, err := embedding.NewEncoder(e.model, embedding.Options{MaxTokens: EmbedMaxTokens, Threads: e.opts.Threads})
		if err != nil {
			return nil, err
		}
		e.enc = enc
	}
	return e.enc.Embed(ctx, texts)
}
