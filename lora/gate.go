package lora

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/memosrt/memosrt/runtime/llama"
)

// GateOptions configure Evaluate's quality gate: the checks a distilled
// adapter passes before it replaces a cube's previous one. Zero means the
// default given.
type GateOptions struct {
	// MinNLLDrop is the least relative drop of the memories' mean per-token
	// NLL with the adapter attached (memory text not in the prompt) from
	// the base model's. Default 0.25: Distill trains each memory's first
	// tokens (DistillOptions.Cue) toward the base's distribution, so a
	// short memory's NLL from BOS drops less than a long one's (one
	// 10-token memory: −37% with 1/1 recalled; 20 memories: −56%).
	MinNLLDrop float64
	// MinRecall is the least share of memories whose second half the
	// adapter's greedy decode reproduces from BOS and the first half.
	// Default 0.8 (issue 14's bar).
	MinRecall float64
	// MinTop1 is the least share of generic positions whose argmax next
	// token is the base model's. Default 0.9.
	MinTop1 float64
	// MaxKL is the largest mean KL(base‖adapter) over the generic
	// positions, nats. Default 0.1.
	MaxKL float64
	// Texts is how many generic texts the base model writes (from BOS,
	// Sampled tokens at temperature 1, then greedy up to TextTokens).
	// Default 4.
	Texts int
	// Sampled is the number of tokens sampled at temperature 1 at the start
	// of each generic text. Default 4.
	Sampled int
	// TextTokens is each generic text's length, tokens with BOS. Default 64.
	TextTokens int
	// Threads for the evaluation context. Default 1.
	Threads int
	// Seed of the generic texts' sampler. Default 7 (not Distill's, so the
	// texts are not the ones trained on).
	Seed uint64
}

func (o GateOptions) withDefaults() GateOptions {
	if o.MinNLLDrop == 0 {
		o.MinNLLDrop = 0.25
	}
	if o.MinRecall == 0 {
		o.MinRecall = 0.8
	}
	if o.MinTop1 == 0 {
		o.MinTop1 = 0.9
	}
	if o.MaxKL == 0 {
		o.MaxKL = 0.1
	}
	if o.Texts <= 0 {
		o.Texts = 4
	}
	if o.Sampled <= 0 {
		o.Sampled = 4
	}
	if o.TextTokens <= 0 {
		o.TextTokens = 64
	}
	if o.Threads <= 0 {
		o.Threads = 1
	}
	if o.Seed == 0 {
		o.Seed = 7
	}
	return o
}

// Evaluation is what Evaluate measured of an adapter.
type Evaluation struct {
	// NLLBase and NLLAdapter are the memories' mean per-token negative
	// log-likelihood (nats; each memory from BOS, its own text only)
	// without and with the adapter.
	NLLBase    float64   `json:"nll_base"`
	NLLAdapter float64   `json:"nll_adapter"`
	PerMemory  []float64 `json:"per_memory"` // NLL with the adapter, per memory, in input order
	// Recalled is how many memories the adapter's greedy decode completes
	// exactly (second half from BOS and the first half).
	Recalled int `json:"recalled"`
	Memories int `json:"memories"`
	// Top1 and KL are the share of generic positions whose argmax agrees
	// and the mean KL(base‖adapter) in nats, over Positions positions.
	Top1      float64 `json:"top1"`
	KL        float64 `json:"kl"`
	Positions int     `json:"positions"`
	// Passed: every GateOptions bar held; Reason says which did not.
	Passed bool   `json:"passed"`
	Reason string `json:"reason,omitempty"`
}

// NLLDrop is the relative drop of the memories' NLL, 1 − NLLAdapter/NLLBase.
func (e Evaluation) NLLDrop() float64 {
	if e.NLLBase == 0 {
		return 0
	}
	return 1 - e.NLLAdapter/e.NLLBase
}

// Evaluate loads the adapter at adapterPath onto the base model at
// modelPath (the load is the first check: a file llama.cpp refuses is an
// error) and measures it as a cube's distilled adapter: the memories' NLL
// and greedy recall with the memory text not in the prompt, and the base
// behaviour on generic text the base model writes itself (the same figures
// as BenchmarkDistill; issue 14). Passed says whether o's bars held.
//
// Cost: one mmap'd model load and about (2 × memory tokens + 2 ×
// Texts × TextTokens) positions of decoding. llama.Init must have been
// called. Errors: an empty memory list, a memory that tokenizes to fewer
// than 2 tokens, llama errors (load, decode) wrapped, ctx.Err().
func Evaluate(ctx context.Context, modelPath, adapterPath string, memories []string, o GateOptions) (Evaluation, error) {
	o = o.withDefaults()
	var ev Evaluation
	if len(memories) == 0 {
		return ev, errors.New("lora: evaluate: no memories")
	}
	m, err := llama.LoadModel(modelPath, llama.ModelParams{UseMmap: true})
	if err != nil {
		return ev, fmt.Errorf("lora: evaluate: %w", err)
	}
	defer m.Close()
	mems := make([][]llama.Token, len(memories))
	longest := o.TextTokens
	for i, s := range memories {
		if mems[i], err = m.Tokenize(s, true, false); err != nil {
			return ev, fmt.Errorf("lora: evaluate: %w", err)
		}
		if len(mems[i]) < 2 {
			return ev, fmt.Errorf("lora: evaluate: memory %d has %d tokens, want ≥ 2", i, len(mems[i]))
		}
		longest = max(longest, len(mems[i]))
	}
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: longest + 1, NBatch: longest + 1, Threads: o.Threads})
	if err != nil {
		return ev, fmt.Errorf("lora: evaluate: %w", err)
	}
	defer c.Close()
	a, err := llama.LoadAdapter(m, adapterPath)
	if err != nil {
		return ev, fmt.Errorf("lora: evaluate: adapter %s: %w", adapterPath, err)
	}
	defer a.Close()
	e := evaluator{c: c}

	// generic text: the base model's own, written before any adapter
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	var texts [][]llama.Token
	for range o.Texts {
		t, err := e.write(ctx, []llama.Token{m.BOS()}, o.TextTokens, o.Sampled, rng)
		if err != nil {
			return ev, err
		}
		texts = append(texts, t)
	}
	ev.Memories = len(mems)
	for _, t := range mems {
		pb, pa, err := e.pair(ctx, a, t)
		if err != nil {
			return ev, err
		}
		nb, na := nll(pb, t), nll(pa, t)
		ev.NLLBase += nb / float64(len(mems))
		ev.NLLAdapter += na / float64(len(mems))
		ev.PerMemory = append(ev.PerMemory, na)
		h := 1 + (len(t)-1)/2
		got, err := e.write(ctx, t[:h], len(t), 0, nil)
		if err != nil {
			return ev, err
		}
		if slices.Equal(got, t) {
			ev.Recalled++
		}
	}
	var same int
	for _, g := range texts {
		pb, pa, err := e.pair(ctx, a, g)
		if err != nil {
			return ev, err
		}
		for i := range pb {
			ev.Positions++
			if argmax(pb[i]) == argmax(pa[i]) {
				same++
			}
			for v := range pb[i] {
				if pb[i][v] > 0 {
					ev.KL += pb[i][v] * (math.Log(pb[i][v]) - math.Log(max(pa[i][v], 1e-30)))
				}
			}
		}
	}
	ev.Top1 = float64(same) / float64(ev.Positions)
	ev.KL /= float64(ev.Positions)
	switch {
	case ev.NLLDrop() < o.MinNLLDrop:
		ev.Reason = fmt.Sprintf("memory NLL %.3f → %.3f drops %.0f%%, want ≥ %.0f%%", ev.NLLBase, ev.NLLAdapter, 100*ev.NLLDrop(), 100*o.MinNLLDrop)
	case float64(ev.Recalled) < o.MinRecall*float64(ev.Memories):
		ev.Reason = fmt.Sprintf("greedy recall %d/%d, want ≥ %.0f%%", ev.Recalled, ev.Memories, 100*o.MinRecall)
	case ev.Top1 < o.MinTop1:
		ev.Reason = fmt.Sprintf("generic top-1 agreement %.1f%%, want ≥ %.1f%%", 100*ev.Top1, 100*o.MinTop1)
	case ev.KL > o.MaxKL:
		ev.Reason = fmt.Sprintf("generic KL %.4f, want ≤ %.4f", ev.KL, o.MaxKL)
	default:
		ev.Passed = true
	}
	return ev, nil
}

// evaluator decodes one sequence at a time from an empty cache.
type evaluator struct {
	c   *llama.Ctx
	buf []float32
}

// use attaches a alone (nil: none). The throwaway 1-token DropGraph decode
// makes the caller's next Decode build its graph anew: llama.cpp reuses a
// graph whose shape and flags match, adapters changed or not (see
// useAdapter in this package's tests).
func (e *evaluator) use(a *llama.Adapter) error {
	e.c.ClearAdapters()
	if a != nil {
		if err := e.c.SetAdapter(a, 1); err != nil {
			return fmt.Errorf("lora: evaluate: %w", err)
		}
	}
	e.c.DropGraph()
	return e.decode([]llama.Token{1})
}

// decode decodes toks as sequence 0 from an empty cache, logits at every
// position.
func (e *evaluator) decode(toks []llama.Token) error {
	e.c.ClearMemory()
	bt := llama.NewBatch(len(toks))
	defer bt.Close()
	for i, t := range toks {
		if err := bt.Add(t, i, 0, true); err != nil {
			return fmt.Errorf("lora: evaluate: %w", err)
		}
	}
	if err := e.c.Decode(bt); err != nil {
		return fmt.Errorf("lora: evaluate: %w", err)
	}
	return nil
}

// dists returns the next-token distributions after each of toks[:len-1].
func (e *evaluator) dists(ctx context.Context, toks []llama.Token) ([][]float64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := e.decode(toks); err != nil {
		return nil, err
	}
	out := make([][]float64, 0, len(toks)-1)
	for i := 0; i < len(toks)-1; i++ {
		e.buf = e.c.Logits(i, e.buf)
		out = append(out, softmaxInto(make([]float64, 0, len(e.buf)), e.buf))
	}
	return out, nil
}

// pair returns toks' next-token distributions (dists) without an adapter
// and with a alone.
func (e *evaluator) pair(ctx context.Context, a *llama.Adapter, toks []llama.Token) (base, adapted [][]float64, err error) {
	if err := e.use(nil); err != nil {
		return nil, nil, err
	}
	if base, err = e.dists(ctx, toks); err != nil {
		return nil, nil, err
	}
	if err := e.use(a); err != nil {
		return nil, nil, err
	}
	adapted, err = e.dists(ctx, toks)
	return base, adapted, err
}

// nll is the mean negative log-likelihood of toks[1:] under ps, toks'
// next-token distributions (dists), nats per token.
func nll(ps [][]float64, toks []llama.Token) float64 {
	var s float64
	for i, p := range ps {
		s -= math.Log(max(p[toks[i+1]], 1e-30))
	}
	return s / float64(len(ps))
}

// write continues prompt to n tokens in all: the first sampled tokens after
// the prompt drawn at temperature 1 from rng, the rest greedy (argmax).
// The prompt is decoded once, then one token per step.
func (e *evaluator) write(ctx context.Context, prompt []llama.Token, n, sampled int, rng *rand.Rand) ([]llama.Token, error) {
	toks := append([]llama.Token(nil), prompt...)
	if err := e.decode(toks); err != nil {
		return nil, err
	}
	bt := llama.NewBatch(1)
	defer bt.Close()
	last := len(toks) - 1 // the batch index of the newest token's logits
	for len(toks) < n {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e.buf = e.c.Logits(last, e.buf)
		next := argmax(e.buf)
		if len(toks)-len(prompt) < sampled {
			p := softmaxInto(make([]float64, 0, len(e.buf)), e.buf)
			u, acc := rng.Float64(), 0.0
			for v, pv := range p {
				if acc += pv; u < acc {
					next = v
					break
				}
			}
		}
		toks = append(toks, llama.Token(next))
		if len(toks) == n {
			break
		}
		bt.Clear()
		if err := bt.Add(llama.Token(next), len(toks)-1, 0, true); err != nil {
			return nil, fmt.Errorf("lora: evaluate: %w", err)
		}
		if err := e.c.Decode(bt); err != nil {
			return nil, fmt.Errorf("lora: evaluate: %w", err)
		}
		last = 0
	}
	return toks, nil
}

// argmax returns the index of the first largest value of p (0 for none).
func argmax[T float32 | float64](p []T) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}
