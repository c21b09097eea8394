package llama

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// EpochSoft's labels reach the loss and its backward, checked through one
// SGD step (lr 1, so Δw = −gradient) on output.weight and
// blk.4.ffn_down.weight from the same start:
//   - one-hot soft rows give exactly Epoch's step;
//   - the model's own next-token distribution as every row makes the
//     gradient of H(p, q) = H(p) + KL(p‖q) vanish at q = p (what remains is
//     float rounding between the inference and the training graph), while
//     Epoch's one-hot labels move the weights;
//   - malformed soft labels are refused before training.
func TestTrainerEpochSoft(t *testing.T) {
	Init("")
	path := testmodels.Stories(t)
	tr, err := NewTrainer(path, TrainOptions{LearningRate: 1, SGD: true, Train: func(n string) bool {
		return n == "output.weight" || n == "blk.4.ffn_down.weight"
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	m := tr.Model()
	n, nv := tr.NCtx(), tr.NVocab()
	var seq []Token
	for len(seq) < n+1 {
		toks, err := m.Tokenize("Lily has a red ball named Bob. Tom keeps his blue car under the big bed. ", true, false)
		if err != nil {
			t.Fatal(err)
		}
		seq = append(seq, toks...)
	}
	seq = seq[:n+1]
	base, err := tr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	// step trains one datapoint with soft labels p (nil: Epoch) and returns
	// the largest |Δw| and the weights after the step, then restores base.
	step := func(p []float32) (float64, []TrainedTensor) {
		t.Helper()
		if p == nil {
			_, err = tr.Epoch(context.Background(), [][]Token{seq}, m.EOS())
		} else {
			_, err = tr.EpochSoft(context.Background(), [][]Token{seq}, [][]float32{p}, m.EOS())
		}
		if err != nil {
			t.Fatal(err)
		}
		after, err := tr.Weights()
		if err != nil {
			t.Fatal(err)
		}
		var d float64
		for i := range base {
			for j := range base[i].Data {
				d = max(d, math.Abs(float64(after[i].Data[j]-base[i].Data[j])))
			}
		}
		if err := tr.SetWeights(base); err != nil {
			t.Fatal(err)
		}
		return d, after
	}
	oneHot := make([]float32, n*nv)
	for j := range n {
		oneHot[j*nv+int(seq[j+1])] = 1
	}
	// The model's own distributions at the n positions.
	ev, err := NewContext(m, ContextParams{NCtx: n, NBatch: n, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch(n)
	for i := range n {
		if err := b.Add(seq[i], i, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := ev.Decode(b); err != nil {
		t.Fatal(err)
	}
	b.Close()
	own := make([]float32, n*nv)
	var buf []float32
	for j := range n {
		buf = ev.Logits(j, buf)
		mx := math.Inf(-1)
		for _, v := range buf {
			mx = max(mx, float64(v))
		}
		var z float64
		for _, v := range buf {
			z += math.Exp(float64(v) - mx)
		}
		for v := range nv {
			own[j*nv+v] = float32(math.Exp(float64(buf[v])-mx) / z)
		}
	}
	ev.Close()

	dHard, wHard := step(nil)
	// Each step's gradient is its own: the pinned ggml-opt summed every
	// gradient since the first step (one-hot 0.285, 0.570, 0.570 after a
	// near-zero step, 0.854, ...) until the Trainer zeroed the
	// accumulators.
	if d2, _ := step(nil); d2 != dHard {
		t.Errorf("the same step twice from the same weights: max |Δw| %g, then %g", dHard, d2)
	}
	dOneHot, wOneHot := step(oneHot)
	dOwn, _ := step(own)
	// Half the rows zero: those keep Epoch's one-hot labels.
	half := append([]float32(nil), own...)
	clear(half[:n/2*nv])
	dHalf, _ := step(half)
	t.Logf("max |Δw| after one SGD step (lr 1): one-hot %.3g, one-hot as soft labels %.3g, own distribution %.3g, own from position %d %.3g", dHard, dOneHot, dOwn, n/2, dHalf)
	for i := range wHard {
		for j := range wHard[i].Data {
			if wHard[i].Data[j] != wOneHot[i].Data[j] {
				t.Fatalf("%s[%d]: Epoch %g, EpochSoft with one-hot rows %g", wHard[i].Name, j, wHard[i].Data[j], wOneHot[i].Data[j])
			}
		}
	}
	if !(dHard > 1e-3 && dOwn < 1e-3*dHard && dHalf > 0.1*dHard) {
		t.Errorf("max |Δw|: one-hot %g, own distribution %g (want < 1e-3 of it), half own %g (want > 0.1 of it)", dHard, dOwn, dHalf)
	}

	bad := append([]float32(nil), own...)
	bad[3] += 0.5
	for name, soft := range map[string][][]float32{
		"count":     {own, own},
		"length":    {own[:nv]},
		"not a sum": {bad},
	} {
		if _, err := tr.EpochSoft(context.Background(), [][]Token{seq}, soft, m.EOS()); !errors.Is(err, ErrTrain) {
			t.Errorf("%s: %v, want ErrTrain", name, err)
		}
	}
}
