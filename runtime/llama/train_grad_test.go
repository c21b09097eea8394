package llama

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// seqLoss is the mean cross-entropy (nats) of seq[1:n+1] given seq[:n],
// decoded by c: the loss llama_opt_epoch minimises for one datapoint.
func seqLoss(t *testing.T, c *Ctx, seq []Token, n int) float64 {
	t.Helper()
	c.ClearMemory()
	b := NewBatch(n)
	defer b.Close()
	for i := range n {
		if err := b.Add(seq[i], i, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	var s float64
	var buf []float32
	for i := range n {
		buf = c.Logits(i, buf)
		mx := math.Inf(-1)
		for _, v := range buf {
			mx = max(mx, float64(v))
		}
		var z float64
		for _, v := range buf {
			z += math.Exp(float64(v) - mx)
		}
		s += math.Log(z) + mx - float64(buf[seq[i+1]])
	}
	return s / float64(n)
}

// The gradient one SGD step applies (g = −Δw/lr) matches central finite
// differences of the loss for the 4 entries with the largest gradients of
// weights whose gradients pass through none, one (ffn_down: the output
// norm), two (ffn_norm) RMS norms and attention (attn_q). Without the
// Trainer's rms_norm_back repair 0 of 8 entries matched for every weight
// below the output norm, often not even in sign, and AdamW raised the
// loss (blk.4.ffn_down.weight alone, lr 1e-5: 3.402 → 3.403 in 20 steps).
//
// On a training copy of a q4_0 model (lora.TrainPlan: the last block's
// matrices in f32, output.weight left in q4_0) the backward pass goes
// through ggml's quantized out_prod (and whatever weight repacking the
// CPU backend does at load). Finite differences are too noisy there
// (the forward pass rounds activations to 8 bits for the quantized
// matmul), so the step gradient is compared with the one on the same
// copy whose output.weight is dequantized too: the same values, exact
// f32 arithmetic.
func TestTrainerGradient(t *testing.T) {
	Init("")
	path := testmodels.Stories(t)
	checkGradients(t, path, []string{"output.weight", "blk.4.ffn_down.weight", "blk.4.ffn_norm.weight", "blk.4.attn_q.weight"})
	t.Run("q4_0 copy", func(t *testing.T) {
		dir := t.TempDir()
		q4 := filepath.Join(dir, "q4_0.gguf")
		if _, err := Quantize(context.Background(), path, q4, QuantizeOptions{Type: "q4_0", Threads: 1}); err != nil {
			t.Fatal(err)
		}
		copies := map[bool]string{}
		for _, out := range []bool{false, true} {
			copies[out] = filepath.Join(dir, fmt.Sprintf("copy-%v.gguf", out))
			if _, err := ConvertGGUF(context.Background(), q4, copies[out], func(ti TensorInfo) int {
				if strings.HasPrefix(ti.Name, "blk.4.") || out && ti.Name == "output.weight" {
					return TypeF32
				}
				return ti.Type
			}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{"blk.4.ffn_down.weight", "blk.4.attn_q.weight"} {
			gq, gf := stepGradient(t, copies[false], name), stepGradient(t, copies[true], name)
			var num, den float64
			for i := range gq {
				num += (gq[i] - gf[i]) * (gq[i] - gf[i])
				den += gf[i] * gf[i]
			}
			rel := math.Sqrt(num / den)
			t.Logf("%s: ‖g_q4 − g_f32‖/‖g_f32‖ = %.4f", name, rel)
			if !(rel < 0.05) {
				t.Errorf("%s: gradient through q4_0 output.weight differs from f32's by %.1f%%", name, 100*rel)
			}
		}
	})
}

// stepGradient returns the gradient one SGD step at lr 1 applies to the
// weight name of the model at path, on the datapoint checkGradients uses.
func stepGradient(t *testing.T, path, name string) []float64 {
	t.Helper()
	tr, err := NewTrainer(path, TrainOptions{Train: func(n string) bool { return n == name }, LearningRate: 1, SGD: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	seq := gradSeq(t, tr)
	base, err := tr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Epoch(context.Background(), [][]Token{seq}, tr.Model().EOS()); err != nil {
		t.Fatal(err)
	}
	after, err := tr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	g := make([]float64, len(base[0].Data))
	for i := range g {
		g[i] = float64(base[0].Data[i]) - float64(after[0].Data[i])
	}
	return g
}

// gradSeq is the datapoint of the gradient tests: two memories repeated
// to NCtx()+1 tokens.
func gradSeq(t *testing.T, tr *Trainer) []Token {
	t.Helper()
	var seq []Token
	for len(seq) < tr.NCtx()+1 {
		toks, err := tr.Model().Tokenize("Lily has a red ball named Bob. Tom keeps his blue car under the big bed. ", true, false)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, toks...)
	}
	return seq[:tr.NCtx()+1]
}

func checkGradients(t *testing.T, path string, names []string) {
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tr, err := NewTrainer(path, TrainOptions{Train: func(n string) bool { return n == name }, LearningRate: 1, SGD: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			m := tr.Model()
			seq := gradSeq(t, tr)
			base, err := tr.Weights()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Epoch(context.Background(), [][]Token{seq}, m.EOS()); err != nil {
				t.Fatal(err)
			}
			after, err := tr.Weights()
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.SetWeights(base); err != nil {
				t.Fatal(err)
			}
			g := make([]float64, len(base[0].Data))
			idx := make([]int, len(g))
			for i := range g {
				g[i] = float64(base[0].Data[i]) - float64(after[0].Data[i])
				idx[i] = i
			}
			sort.Slice(idx, func(a, b int) bool { return math.Abs(g[idx[a]]) > math.Abs(g[idx[b]]) })
			ev, err := NewContext(m, ContextParams{NCtx: tr.NCtx(), NBatch: tr.NCtx(), Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer ev.Close()
			w := base[0]
			const h = 1e-2
			agree := 0
			for _, i := range idx[:4] {
				w0 := w.Data[i]
				w.Data[i] = w0 + h
				tr.SetWeights([]TrainedTensor{w})
				lp := seqLoss(t, ev, seq, tr.NCtx())
				w.Data[i] = w0 - h
				tr.SetWeights([]TrainedTensor{w})
				lm := seqLoss(t, ev, seq, tr.NCtx())
				w.Data[i] = w0
				tr.SetWeights([]TrainedTensor{w})
				fd := (lp - lm) / (2 * h)
				t.Logf("%s[%d]: step gradient %+.5f, finite difference %+.5f", name, i, g[i], fd)
				if math.Abs(fd-g[i]) <= 0.1*math.Abs(fd)+1e-5 {
					agree++
				}
			}
			if agree < 4 {
				t.Errorf("%s: %d of 4 gradients match finite differences", name, agree)
			}
		})
	}
}
