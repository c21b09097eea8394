package memosrt

import "context"

// Embed returns one vector per text, [len(texts)][dim]float32, and the
// input's token count: Options.Embedder when set, else the loaded model
// (runtime.Engine.Embed: pooled as the model says, mean otherwise,
// L2-normalized), else the upstream's embedding model. Errors:
// ErrNoModel, the embedder's errors.
func (o *OS) Embed(ctx context.Context, texts []string) ([][]float32, int, error) {
	if err := o.enter(); err != nil {
		return nil, 0, err
	}
	defer o.leave()
	ctx, done := o.bound(ctx)
	defer done()
	if o.up != nil {
		return o.up.embed(ctx, texts)
	}
	var vecs [][]float32
	var err error
	switch {
	case o.opts.Embedder != nil:
		vecs, err = o.opts.Embedder.Embed(ctx, texts)
	case o.eng != nil:
		vecs, err = o.eng.Embed(ctx, texts)
	default:
		return nil, 0, ErrNoModel
	}
	if err != nil {
		return nil, 0, err
	}
	n := 0
	if o.eng != nil {
		for _, t := range texts {
			if toks, err := o.eng.Tokenize(t, false); err == nil {
				n += len(toks)
			}
		}
	}
	return vecs, n, nil
}
