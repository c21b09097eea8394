package runtime

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/memosrt/memosrt/runtime/llama"
)

// ErrNoEmbedding is returned when the model yields no pooled embedding.
var ErrNoEmbedding = errors.New("runtime: model produced no embedding")

// EmbedMaxTokens bounds one text's tokens for Embed; longer texts are
// truncated (Ollama's /api/embed truncates by default too).
const EmbedMaxTokens = 512

// Embed returns one L2-normalized embedding ([n_embd]float32) per text,
// computed in a second llama context on the same model with embeddings on
// and the model's pooling (mean when the model names none, as for decoder
// models). Texts are truncated to EmbedMaxTokens tokens. The embedding
// context is created on first use and freed by Close.
func (e *Engine) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	defer e.BeginForeground()()
	if err := e.lock(); err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	if e.embCtx == nil {
		pooling := llama.PoolingUnspecified
		if _, ok := e.model.Meta(fmtKey(e.model, "pooling_type")); !ok {
			pooling = llama.PoolingMean
		}
		c, err := llama.NewContext(e.model, llama.ContextParams{NCtx: EmbedMaxTokens, NBatch: EmbedMaxTokens, NUBatch: EmbedMaxTokens,
			NSeqMax: 1, Threads: e.opts.Threads, TypeK: kvTypes["f16"], TypeV: kvTypes["f16"], FlashAttn: llama.FlashAttnAuto,
			KVUnified: true, Embeddings: true, Pooling: pooling})
		if err != nil {
			return nil, fmt.Errorf("runtime: embedding context: %w", err)
		}
		e.embCtx = c
		e.embBatch = llama.NewBatch(EmbedMaxTokens)
	}
	out := make([][]float32, 0, len(texts))
	for _, text := range texts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		toks, err := e.model.Tokenize(text, true, false)
		if err != nil {
			return nil, err
		}
		if len(toks) == 0 {
			toks = []Token{max(e.model.BOS(), 0)}
		}
		toks = toks[:min(len(toks), e.embCtx.NCtx(), EmbedMaxTokens)]
		e.embCtx.ClearMemory()
		e.embBatch.Clear()
		for i, t := range toks {
			e.embBatch.Add(t, i, 0, true)
		}
		if err := e.embCtx.Decode(e.embBatch); err != nil {
			return nil, err
		}
		v := e.embCtx.Embeddings(0, e.shape.NEmbd)
		if v == nil {
			return nil, ErrNoEmbedding
		}
		var s float64
		for _, x := range v {
			s += float64(x) * float64(x)
		}
		if s > 0 {
			inv := float32(1 / math.Sqrt(s))
			for i := range v {
				v[i] *= inv
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// fmtKey returns "<arch>.<name>", the GGUF key of an architecture field.
func fmtKey(m *llama.Model, name string) string {
	arch, _ := m.Meta("general.architecture")
	return arch + "." + name
}
