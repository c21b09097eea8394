package lora

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
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
