package lora

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Delta is one weight matrix of the base model before and after training
// (a fine-tune of the full matrix). Base and Trained hold
// [NOut][NIn]float32, row-major with NIn fastest: the GGUF layout of a
// tensor of shape [NIn, NOut] (ne0 first), as llama.TrainedTensor holds it.
type Delta struct {
	Name      string // the base tensor, e.g. "blk.4.ffn_up.weight"
	NIn, NOut int
	Base      []float32
	Trained   []float32
}

// Factor is a rank-r LoRA pair for one base tensor, in llama.cpp's layout:
// A is lora_a of shape [NIn, r] (data [r][NIn]), B is lora_b of shape
// [r, NOut] (data [NOut][r]); the update is ΔW = B·A (an [NOut][NIn]
// matrix), scaled by Scale·alpha/r at inference.
type Factor struct {
	Name      string
	NIn, NOut int
	Rank      int
	A, B      []float32
	// Kept is the fraction of ‖ΔW‖²_F (the sum of squared singular values)
	// the rank-r pair keeps, in [0, 1].
	Kept float64
}

// Extract factors trained − base into a rank-r LoRA pair by truncated SVD:
// ΔW = U·S·Vᵀ, A = sqrt(S_r)·V_rᵀ, B = U_r·sqrt(S_r), the best rank-r
// approximation of ΔW in Frobenius norm (Eckart–Young). LoRA is Hu et al.
// 2021, "LoRA: Low-Rank Adaptation of Large Language Models"; extracting an
// adapter from a full fine-tune's weight difference by SVD is what LoRA
// extraction tools do (e.g. kohya-ss sd-scripts extract_lora_from_models.py,
// mergekit-extract-lora). rank is capped at min(NIn, NOut).
func Extract(d Delta, rank int) (Factor, error) {
	n := d.NIn * d.NOut
	if d.NIn <= 0 || d.NOut <= 0 || len(d.Base) != n || len(d.Trained) != n {
		return Factor{}, fmt.Errorf("lora: delta %s: %d and %d values for [%d, %d]", d.Name, len(d.Base), len(d.Trained), d.NIn, d.NOut)
	}
	if rank <= 0 {
		return Factor{}, fmt.Errorf("lora: delta %s: rank %d <= 0", d.Name, rank)
	}
	rank = min(rank, d.NIn, d.NOut)
	diff := make([]float64, n)
	for i := range diff {
		diff[i] = float64(d.Trained[i]) - float64(d.Base[i])
	}
	var svd mat.SVD
	if !svd.Factorize(mat.NewDense(d.NOut, d.NIn, diff), mat.SVDThin) {
		return Factor{}, fmt.Errorf("lora: delta %s: SVD did not converge", d.Name)
	}
	s := svd.Values(nil)
	var u, v mat.Dense
	svd.UTo(&u) // [NOut][k]
	svd.VTo(&v) // [NIn][k]
	f := Factor{Name: d.Name, NIn: d.NIn, NOut: d.NOut, Rank: rank,
		A: make([]float32, rank*d.NIn), B: make([]float32, d.NOut*rank)}
	var total, kept float64
	for k, sk := range s {
		total += sk * sk
		if k < rank {
			kept += sk * sk
		}
	}
	f.Kept = 1
	if total > 0 {
		f.Kept = kept / total
	}
	for k := range rank {
		r := math.Sqrt(s[k])
		for i := range d.NIn {
			f.A[k*d.NIn+i] = float32(r * v.At(i, k))
		}
		for o := range d.NOut {
			f.B[o*rank+k] = float32(u.At(o, k) * r)
		}
	}
	return f, nil
}

// WriteFactors writes factors as an ordinary GGUF LoRA adapter for the base
// model b (tensors <name>.lora_a and <name>.lora_b in f32,
// adapter.lora.alpha = the rank, so the update is ΔW·Scale), the layout
// WriteRandom writes and Check accepts. All factors must share one rank.
func WriteFactors(path string, b Base, name string, factors []Factor) error {
	if len(factors) == 0 {
		return fmt.Errorf("lora: no factors to write")
	}
	r := factors[0].Rank
	var ts []TensorData
	for _, f := range factors {
		if f.Rank != r {
			return fmt.Errorf("lora: factor %s has rank %d, others %d", f.Name, f.Rank, r)
		}
		ts = append(ts,
			TensorData{Name: f.Name + ".lora_a", Shape: []uint64{uint64(f.NIn), uint64(r)}, Data: f.A},
			TensorData{Name: f.Name + ".lora_b", Shape: []uint64{uint64(r), uint64(f.NOut)}, Data: f.B})
	}
	if name == "" {
		name = "memosrt-distilled"
	}
	meta := map[string]any{
		"general.architecture": b.Arch,
		"general.type":         "adapter",
		"general.name":         name,
		"adapter.type":         "lora",
		"adapter.lora.alpha":   float32(r),
	}
	return WriteFile(path, meta, ts)
}
