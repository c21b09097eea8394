package lora

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	m, ev := evalContext(t, path, 256)
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
			s += nll(dists(t, c, tk), tk)
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

// Distill end to end on stories260K with two memories: the adapter file
// passes Check, adapts the last block's five matrices at full rank (64),
// lowers both memories' NLL with the memory not in the prompt, and the
// step count is epochs × (memories + generic datapoints). A cancelled ctx
// writes nothing; a budget reached before the first step writes an
// untrained (zero) adapter and says Truncated.
func TestDistill(t *testing.T) {
	path := testmodels.Stories(t)
	llama.Init("")
	mems := distillMemories[:2]
	dir := t.TempDir()
	res, err := Distill(context.Background(), path, mems, DistillOptions{Out: filepath.Join(dir, "a.gguf"), Epochs: 4, Generic: 1, Threads: 1, Weights: DistillWeights(4)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *res)
	want := []string{"blk.4.attn_q.weight", "blk.4.attn_output.weight", "blk.4.ffn_gate.weight", "blk.4.ffn_down.weight", "blk.4.ffn_up.weight"}
	if fmt.Sprint(res.Tensors) != fmt.Sprint(want) || res.Rank != 64 || res.Steps+res.Skipped != 4*3 || res.Epochs != 4 || res.Truncated || res.MinKept < 1-1e-9 {
		t.Errorf("tensors %v rank %d steps %d + skipped %d epochs %d truncated %v kept %g; want %v, 64, 12, 4, false, 1", res.Tensors, res.Rank, res.Steps, res.Skipped, res.Epochs, res.Truncated, res.MinKept, want)
	}
	f, err := Inspect(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(f, stories(t)); err != nil {
		t.Fatal(err)
	}
	m, ev := evalContext(t, path, 256)
	a, err := llama.LoadAdapter(m, res.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i, s := range mems {
		tk, err := m.Tokenize(s, true, false)
		if err != nil {
			t.Fatal(err)
		}
		useAdapter(t, ev, nil)
		nb := nll(dists(t, ev, tk), tk)
		useAdapter(t, ev, a)
		na := nll(dists(t, ev, tk), tk)
		t.Logf("memory %d NLL: base %.4f, adapter %.4f", i, nb, na)
		if !(na < nb-0.1) {
			t.Errorf("memory %d NLL: base %.4f, adapter %.4f", i, nb, na)
		}
	}
	useAdapter(t, ev, nil)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(dir, "cancelled.gguf")
	if _, err := Distill(ctx, path, mems, DistillOptions{Out: out, Epochs: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cancelled run left %s: %v", out, err)
	}
	res, err = Distill(context.Background(), path, mems, DistillOptions{Out: filepath.Join(dir, "b.gguf"), Epochs: 1, Rank: 4, Generic: -1, Budget: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || res.Steps != 0 || res.Rank != 4 {
		t.Errorf("budget 1ns: truncated %v, steps %d, rank %d; want true, 0, 4", res.Truncated, res.Steps, res.Rank)
	}
}

// DistillOptions.Margin: one memory trained alone at a high learning rate
// becomes known, sits out the epochs after that (Skipped), and the result
// counts it recalled; with Margin negative it trains every epoch.
func TestDistillMargin(t *testing.T) {
	path := testmodels.Stories(t)
	llama.Init("")
	dir := t.TempDir()
	o := DistillOptions{Out: filepath.Join(dir, "a.gguf"), Epochs: 12, LearningRate: 1e-2, Generic: -1, Threads: 1, Margin: 0.5}
	res, err := Distill(context.Background(), path, distillMemories[:1], o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("steps %d skipped %d known %d loss %.3f→%.3f", res.Steps, res.Skipped, res.Known, res.LossFirst, res.LossLast)
	if res.Known != 1 || res.Skipped == 0 || res.Steps+res.Skipped != 12 {
		t.Errorf("margin 0.5: known %d, skipped %d, steps %d; want 1, > 0, 12 in all", res.Known, res.Skipped, res.Steps)
	}
	o.Margin, o.Out = -1, filepath.Join(dir, "b.gguf")
	if res, err = Distill(context.Background(), path, distillMemories[:1], o); err != nil {
		t.Fatal(err)
	}
	if res.Skipped != 0 || res.Steps != 12 {
		t.Errorf("margin -1: skipped %d, steps %d; want 0, 12", res.Skipped, res.Steps)
	}
}

func TestDistillRefuses(t *testing.T) {
	llama.Init("")
	dir := t.TempDir()
	err := DistillOptions{Epochs: -1, LearningRate: -1, Rank: -2, Threads: -1, Budget: -1, Copies: -1, Anchor: -1, Margin: math.NaN()}.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 8 {
		t.Errorf("Validate: %v, want 9 problems", err)
	}
	for _, c := range []struct {
		name, model string
		mems        []string
		want        error
	}{
		{"i32 weight", "i32", []string{"Lily has a red ball."}, ErrNotTrainable},
		{"no memories", "stories260K.gguf", nil, nil},
		{"too long", "stories260K.gguf", []string{strings.Repeat("Lily has a red ball. ", 40)}, nil},
		{"no out", "", []string{"x"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := DistillOptions{Out: filepath.Join(dir, c.name+".gguf"), Epochs: 1}
			p := testmodels.Stories(t)
			switch c.model {
			case "":
				o.Out = ""
			case "i32":
				p = untrainable(t, dir)
			default:
				p = testmodels.Path(t, c.model)
			}
			_, err := Distill(context.Background(), p, c.mems, o)
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			t.Log(err)
			if _, err := os.Stat(o.Out); o.Out != "" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s written: %v", o.Out, err)
			}
		})
	}
}

// evalContext loads the model at path (mapped) and an evaluation context
// of nctx tokens (batch nctx, 1 thread: on a model this small a second
// thread only waits at ggml's barrier, and pinned to one core it spins
// there) on it, both closed at the end of
// the test or benchmark.
func evalContext(tb testing.TB, path string, nctx int) (*llama.Model, *llama.Ctx) {
	tb.Helper()
	m, err := llama.LoadModel(path, llama.ModelParams{UseMmap: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	ev, err := llama.NewContext(m, llama.ContextParams{NCtx: nctx, NBatch: nctx, Threads: 1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ev.Close() })
	return m, ev
}

// Pause runs before every optimizer step, and its error stops training
// before that step with no file written.
func TestDistillPause(t *testing.T) {
	path := testmodels.Stories(t)
	llama.Init("")
	out := filepath.Join(t.TempDir(), "a.gguf")
	stop := errors.New("stop")
	calls := 0
	o := DistillOptions{Out: out, Epochs: 4, Generic: -1, Threads: 1, Margin: -1, Pause: func(context.Context) error {
		if calls++; calls == 3 {
			return stop
		}
		return nil
	}}
	if _, err := Distill(context.Background(), path, distillMemories[:1], o); !errors.Is(err, stop) {
		t.Fatalf("err %v, want the pause's", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s written: %v", out, err)
	}
	calls, o.Pause = 0, func(context.Context) error { calls++; return nil }
	res, err := Distill(context.Background(), path, distillMemories[:1], o)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 4 || res.Steps != 4 {
		t.Fatalf("%d pauses for %d steps, want 4 and 4", calls, res.Steps)
	}
}

// DistillRAM's estimate, figure by figure, for stories260K (512-token
// vocabulary, 1 MiB file): 20 memories and the default 120 generic
// datapoints of 257 × 512 float32 soft labels, and the last block's five
// trained matrices four times over.
func TestDistillRAM(t *testing.T) {
	path := testmodels.Stories(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := ReadBase(path)
	if err != nil {
		t.Fatal(err)
	}
	var trained int64
	for n, sh := range bs.Shapes {
		if DistillWeights(4)(n) {
			trained += int64(sh[0] * sh[1])
		}
	}
	got, err := DistillRAM(path, 20, DistillOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := fi.Size() + 140*257*512*4 + 16*trained
	t.Logf("20 memories: %d bytes (%.1f MiB), %d trained weights", got, float64(got)/(1<<20), trained)
	if got != want || trained == 0 {
		t.Fatalf("DistillRAM %d, want %d", got, want)
	}
	if one, _ := DistillRAM(path, 1, DistillOptions{Generic: -1}); one != fi.Size()+257*512*4+16*trained {
		t.Fatalf("1 memory, no generic: %d", one)
	}
	if _, err := DistillRAM(filepath.Join(t.TempDir(), "none.gguf"), 1, DistillOptions{}); err == nil {
		t.Fatal("a missing model estimated")
	}
}
