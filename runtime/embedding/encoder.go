package embedding

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"strconv"

	"github.com/memosrt/memosrt/runtime/llama"
)

// DefaultMaxTokens is Options.MaxTokens's default: the tokens of one text
// an Encoder embeds, beyond which a text is truncated (Ollama's /api/embed
// truncates by default too; 512 is BERT's training context).
const DefaultMaxTokens = 512

// Options are an Encoder's settings. Zero values mean the defaults.
type Options struct {
	// MaxTokens bounds one text, in tokens (special ones included);
	// longer texts are truncated. Default DefaultMaxTokens, capped at the
	// model's training context (BERT's position embeddings end there).
	MaxTokens int
	// Threads is the CPU threads a decode uses. Default: all CPUs.
	Threads int
}

// Validate reports every invalid field at once, wrapped in ErrOptions.
func (o Options) Validate() error {
	var bad []string
	if o.MaxTokens < 0 {
		bad = append(bad, fmt.Sprintf("MaxTokens %d < 0", o.MaxTokens))
	}
	if o.Threads < 0 || o.Threads > 512 {
		bad = append(bad, fmt.Sprintf("Threads %d not in [0, 512]", o.Threads))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %v", ErrOptions, bad)
	}
	return nil
}

// Pooling types, as llama.cpp's enum llama_pooling_type and the GGUF key
// <arch>.pooling_type number them.
const (
	PoolingMean = llama.PoolingMean
	PoolingCLS  = llama.PoolingCLS
	PoolingLast = llama.PoolingLast
)

// Pooling returns how vectors of m are pooled: the <arch>.pooling_type its
// GGUF declares (PoolingMean, PoolingCLS or PoolingLast), PoolingMean when
// it declares none or 0 (a decoder model). ErrPooling for any other
// value (4: a reranker's ranking head).
func Pooling(m *llama.Model) (int, error) {
	arch, _ := m.Meta("general.architecture")
	v, ok := m.Meta(arch + ".pooling_type")
	if !ok {
		return PoolingMean, nil
	}
	switch n, err := strconv.Atoi(v); {
	case err != nil:
		return 0, fmt.Errorf("%w: %s.pooling_type is %q", ErrPooling, arch, v)
	case n == 0:
		return PoolingMean, nil
	case n == PoolingMean || n == PoolingCLS || n == PoolingLast:
		return n, nil
	default:
		return 0, fmt.Errorf("%w: %s.pooling_type is %d (want 1 mean, 2 CLS or 3 last; 4 is a reranker's)", ErrPooling, arch, n)
	}
}

// Encoder embeds texts with one llama context of a model, created with
// embeddings on and the model's pooling. Not safe for concurrent use.
type Encoder struct {
	model   *llama.Model
	ctx     *llama.Ctx
	batch   *llama.Batch
	dim     int // n_embd
	max     int // tokens of one text
	pooling int
}

// NewEncoder creates an Encoder on m, which must outlive it (close the
// Encoder first). Errors: ErrOptions, ErrPooling, llama.ErrContext.
func NewEncoder(m *llama.Model, o Options) (*Encoder, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	pooling, err := Pooling(m)
	if err != nil {
		return nil, err
	}
	sh := m.Shape()
	n := o.MaxTokens
	if n == 0 {
		n = DefaultMaxTokens
	}
	if sh.NCtxTrain > 0 {
		n = min(n, sh.NCtxTrain)
	}
	threads := o.Threads
	if threads == 0 {
		threads = goruntime.NumCPU()
	}
	// one sequence of up to n tokens decoded in one micro-batch: an
	// encoder (non-causal attention) must see a whole input at once
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: n, NBatch: n, NUBatch: n, NSeqMax: 1, Threads: threads,
		TypeK: llama.TypeF16, TypeV: llama.TypeF16, FlashAttn: llama.FlashAttnAuto, KVUnified: true,
		Embeddings: true, Pooling: pooling})
	if err != nil {
		return nil, fmt.Errorf("embedding: context: %w", err)
	}
	return &Encoder{model: m, ctx: c, batch: llama.NewBatch(n), dim: sh.NEmbd, max: n, pooling: pooling}, nil
}

// Dim is the length of every vector: the model's n_embd.
func (e *Encoder) Dim() int { return e.dim }

// MaxTokens is the longest text, in tokens, embedded whole.
func (e *Encoder) MaxTokens() int { return e.max }

// Pooling is the pooling in use (PoolingMean, PoolingCLS or PoolingLast).
func (e *Encoder) Pooling() int { return e.pooling }

// Embed returns one unit-length (L2) vector per text, in order:
// [len(texts)][Dim()]float32. Each text is tokenized with the model's
// special tokens (BERT: [CLS] ... [SEP]; an empty text becomes its special
// tokens, or the BOS token), truncated to MaxTokens tokens, decoded alone
// and pooled. ctx is checked between texts. Errors: ctx's, ErrClosed,
// llama.ErrTokenize, llama.ErrDecode, ErrNoEmbedding; no vector is
// returned with an error.
func (e *Encoder) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if e.ctx == nil {
		return nil, ErrClosed
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
			toks = []llama.Token{max(e.model.BOS(), 0)}
		}
		toks = toks[:min(len(toks), e.max)]
		e.ctx.ClearMemory()
		e.batch.Clear()
		for i, t := range toks {
			if err := e.batch.Add(t, i, 0, true); err != nil {
				return nil, err
			}
		}
		if err := e.ctx.Decode(e.batch); err != nil {
			return nil, fmt.Errorf("embedding: decode of %d tokens: %w", len(toks), err)
		}
		v := e.ctx.Embeddings(0, e.dim)
		if v == nil {
			return nil, ErrNoEmbedding
		}
		out = append(out, normalize(v))
	}
	return out, nil
}

// Close frees the context. Idempotent.
func (e *Encoder) Close() error {
	if e.ctx != nil {
		e.batch.Close()
		e.ctx.Close()
		e.ctx, e.batch = nil, nil
	}
	return nil
}

// normalize scales v in place to unit L2 norm (a zero vector stays zero:
// callers refuse it, embed.Valid) and returns it.
func normalize(v []float32) []float32 {
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
	return v
}
