package lora

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

// A rank-2 delta comes back exactly from a rank-2 extraction, and the
// written adapter passes Inspect and Check against stories260K.
func TestExtractRank2(t *testing.T) {
	const nIn, nOut = 64, 172 // blk.4.ffn_up.weight of stories260K
	rng := rand.New(rand.NewPCG(1, 2))
	b0 := make([]float64, nOut*2)
	a0 := make([]float64, 2*nIn)
	for i := range b0 {
		b0[i] = rng.NormFloat64() * 0.1
	}
	for i := range a0 {
		a0[i] = rng.NormFloat64() * 0.1
	}
	d := Delta{Name: "blk.4.ffn_up.weight", NIn: nIn, NOut: nOut, Base: make([]float32, nIn*nOut), Trained: make([]float32, nIn*nOut)}
	for o := range nOut {
		for i := range nIn {
			d.Base[o*nIn+i] = float32(rng.NormFloat64())
			d.Trained[o*nIn+i] = d.Base[o*nIn+i] + float32(b0[o*2]*a0[i]+b0[o*2+1]*a0[nIn+i])
		}
	}
	for _, rank := range []int{2, 8} {
		f, err := Extract(d, rank)
		if err != nil {
			t.Fatal(err)
		}
		worst := 0.0
		for o := range nOut {
			for i := range nIn {
				var got float64
				for k := range f.Rank {
					got += float64(f.B[o*f.Rank+k]) * float64(f.A[k*nIn+i])
				}
				want := float64(d.Trained[o*nIn+i]) - float64(d.Base[o*nIn+i])
				worst = max(worst, math.Abs(got-want))
			}
		}
		if worst > 1e-4 || f.Kept < 1-1e-6 {
			t.Errorf("rank %d: max error %g, kept %g", rank, worst, f.Kept)
		}
	}
	f, err := Extract(d, 2)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "distilled.gguf")
	if err := WriteFactors(path, stories(t), "", []Factor{f}); err != nil {
		t.Fatal(err)
	}
	file, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := Check(file, stories(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", info)
	if _, err := Extract(Delta{Name: "x", NIn: 2, NOut: 2, Base: make([]float32, 3), Trained: make([]float32, 4)}, 1); err == nil {
		t.Error("mismatched delta accepted")
	}
}

// End to end on stories260K: the last block trained in process (memories
// packed into one datapoint), its delta extracted at full rank and written
// as a GGUF adapter; the adapter on the base model gives the trained
// model's memory NLL (so names, A/B layout and alpha/rank scaling match
// llama.cpp's llama-adapter.cpp), and rank 8 keeps part of the drop.
func TestDistillAdapterMatchesTrainedModel(t *testing.T) {
	path := testmodels.Stories(t)
	llama.Init("")
	m, err := llama.LoadModel(path, llama.ModelParams{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ev, err := llama.NewContext(m, llama.ContextParams{NCtx: 256, NBatch: 256, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	tr, err := llama.NewTrainer(path, llama.TrainOptions{Threads: 2, LearningRate: 1e-3, Train: func(n string) bool {
		switch n {
		case "blk.4.attn_q.weight", "blk.4.attn_output.weight", "blk.4.ffn_gate.weight", "blk.4.ffn_up.weight", "blk.4.ffn_down.weight":
			return true
		}
		return false
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var mems [][]llama.Token
	var seq []llama.Token
	for _, s := range distillMemories {
		tk, err := m.Tokenize(s, true, false)
		if err != nil {
			t.Fatal(err)
		}
		mems = append(mems, tk)
		seq = append(seq, tk...)
	}
	seq = seq[:tr.NCtx()+1]
	base, err := tr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := tr.Epoch(context.Background(), [][]llama.Token{seq}, m.EOS()); err != nil {
			t.Fatal(err)
		}
	}
	trained, err := tr.Weights()
	if err != nil {
		t.Fatal(err)
	}
	meanNLL := func(c *llama.Ctx) float64 {
		var s float64
		for _, tk := range mems {
			s += nll(t, c, tk)
		}
		return s / float64(len(mems))
	}
	tc, err := llama.NewContext(tr.Model(), llama.ContextParams{NCtx: 256, NBatch: 256, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	full := meanNLL(tc)
	tc.Close()
	useAdapter(t, ev, nil)
	nllBase := meanNLL(ev)
	got := map[int]float64{}
	for _, rank := range []int{64, 8} {
		var fs []Factor
		for i := range base {
			f, err := Extract(Delta{Name: base[i].Name, NIn: base[i].Shape[0], NOut: base[i].Shape[1], Base: base[i].Data, Trained: trained[i].Data}, rank)
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		out := filepath.Join(t.TempDir(), fmt.Sprintf("rank%d.gguf", rank))
		if err := WriteFactors(out, stories(t), "", fs); err != nil {
			t.Fatal(err)
		}
		a, err := llama.LoadAdapter(m, out)
		if err != nil {
			t.Fatal(err)
		}
		useAdapter(t, ev, a)
		got[rank] = meanNLL(ev)
		useAdapter(t, ev, nil)
		a.Close()
	}
	t.Logf("memory NLL: base %.4f, trained model %.4f, full-rank adapter %.4f, rank-8 adapter %.4f", nllBase, full, got[64], got[8])
	if !(full < nllBase-0.3) {
		t.Errorf("training lowered the memory NLL from %.4f to %.4f only", nllBase, full)
	}
	if math.Abs(got[64]-full) > 2e-3 {
		t.Errorf("full-rank adapter NLL %.4f, trained model %.4f", got[64], full)
	}
	if !(got[8] < nllBase && got[8] > full-1e-3) {
		t.Errorf("rank-8 adapter NLL %.4f outside (%.4f, %.4f)", got[8], full, nllBase)
	}
}
