package runtime

import (
	"context"
	"fmt"
	"slices"
)

// ArgmaxAt decodes toks into seq at positions [pos0, pos0+len(toks)) with
// logits on every token (teacher forcing: each row sees the tokens before
// it, not a sampled one) and returns each row's argmax, the first of equal
// values: out[i] is the greedy next token after toks[i]. seq must hold
// exactly positions [0, pos0); it holds [0, pos0+len(toks)) afterwards.
// This is how composition and lossy KV are measured against a full
// prefill (package kvgate). Errors: ErrEmptyPrompt, ErrPromptTooLong
// (more tokens than one batch of the engine, or past n_ctx), ctx's,
// ErrClosed, decode errors.
func (e *Engine) ArgmaxAt(ctx context.Context, seq int, toks []Token, pos0 int) ([]Token, error) {
	if len(toks) == 0 {
		return nil, ErrEmptyPrompt
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := e.lock(); err != nil {
		return nil, err
	}
	defer e.mu.Unlock()
	if len(toks) > e.batch.Cap() || pos0+len(toks) > e.kv.NCtx {
		return nil, fmt.Errorf("%w: %d tokens at position %d (batch %d, n_ctx %d)", ErrPromptTooLong, len(toks), pos0, e.batch.Cap(), e.kv.NCtx)
	}
	e.batch.Clear()
	defer e.batch.Clear()
	for i, tok := range toks {
		if err := e.batch.Add(tok, pos0+i, seq, true); err != nil {
			return nil, err
		}
	}
	if err := e.ctx.Decode(e.batch); err != nil {
		return nil, err
	}
	out := make([]Token, len(toks))
	var row []float32
	for i := range toks {
		row = e.ctx.Logits(i, row)
		out[i] = Token(slices.Index(row, slices.Max(row)))
	}
	return out, nil
}
