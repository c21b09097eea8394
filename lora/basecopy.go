package lora

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/memosrt/memosrt/runtime/llama"
)

// TrainPlan is how Distill trains on a base model, read from its tensor
// table before anything is loaded (PlanTraining).
//
// ggml-opt trains f32 weights only, and the pinned ggml's backward pass
// has no f16 or bf16 kernel for a matrix it passes through
// (ggml_compute_forward_out_prod aborts), while every type ggml computes
// with has a dequantizer. So a base whose weights to train are f16 or
// quantized trains on a copy of the file (llama.ConvertGGUF) in which
// those weights, and the output matrix when it is f16 or bf16 (the one
// untrained matrix the backward pass goes through: output.weight, or
// token_embd.weight when the output is tied to it), are dequantized to
// f32, and everything else keeps its bytes. The copy's f32 rows hold the
// base's exact values, so the weight delta Extract factors is measured
// from the dequantized base, and the adapter applies to the original file
// through llama.cpp's ordinary adapter path (a LoRA product added to the
// quantized matmul). Only the last block trains (llama.Trainer), so the
// copy's f32 part is one block's matrices.
type TrainPlan struct {
	// Weights are the tensors to train, GGUF order.
	Weights []string
	// Types maps each of Weights, and the output matrix, to its type in
	// the base file ("q8_0").
	Types map[string]string
	// BaseType is the types of Weights in the base file, most frequent
	// first, joined by "+" ("f32", "q8_0", "q8_0+f16").
	BaseType string
	// Convert lists the tensors the training copy holds in f32; empty when
	// the base trains as it is (no copy).
	Convert []string
	// CopyBytes is the size of the training copy: the base file's, with
	// each converted tensor at 4 bytes per value (0: no copy).
	CopyBytes int64
}

// PlanTraining reads the tensor table of the base model at modelPath and
// returns the plan for training the weights weights chooses (nil: the
// last block's DistillWeights).
//
// Errors: the GGUF's; ErrNotTrainable, naming the weight and its type,
// for a chosen weight (or the output matrix) of a type ggml cannot
// dequantize, a chosen weight that is not a matrix, or a filter that
// chooses nothing.
func PlanTraining(modelPath string, weights func(string) bool) (TrainPlan, error) {
	var p TrainPlan
	ts, err := llama.ReadTensors(modelPath)
	if err != nil {
		return p, fmt.Errorf("lora: base model %s: %w", modelPath, err)
	}
	if weights == nil {
		last := -1
		for _, t := range ts {
			var b int
			if _, err := fmt.Sscanf(t.Name, "blk.%d.", &b); err == nil && b > last {
				last = b
			}
		}
		weights = DistillWeights(last)
	}
	out := "output.weight"
	if !slices.ContainsFunc(ts, func(t llama.TensorInfo) bool { return t.Name == out }) {
		out = "token_embd.weight" // tied output
	}
	p.Types = map[string]string{}
	count := map[string]int{}
	fi, err := os.Stat(modelPath)
	if err != nil {
		return p, fmt.Errorf("lora: %w", err)
	}
	extra := int64(0) // bytes the copy adds
	for _, t := range ts {
		chosen := weights(t.Name)
		if !chosen && t.Name != out {
			continue
		}
		typ := llama.TypeName(t.Type)
		p.Types[t.Name] = typ
		if !llama.Dequantizable(t.Type) {
			return p, fmt.Errorf("%w: %s is %s, which the pinned ggml cannot dequantize, so it cannot be trained or passed through in training",
				ErrNotTrainable, t.Name, typ)
		}
		if chosen {
			if len(t.Shape) != 2 {
				return p, fmt.Errorf("%w: %s (%s) has shape %v, want a matrix", ErrNotTrainable, t.Name, typ, t.Shape)
			}
			p.Weights = append(p.Weights, t.Name)
			count[typ]++
		}
		// a chosen weight trains in f32; the output matrix needs f32 only
		// where ggml's backward pass has no kernel for its type
		if t.Type != llama.TypeF32 && (chosen || !llama.IsQuantized(t.Type)) {
			p.Convert = append(p.Convert, t.Name)
			n := int64(1)
			for _, d := range t.Shape {
				n *= d
			}
			extra += 4*n - t.Bytes
		}
	}
	if len(p.Weights) == 0 {
		return p, fmt.Errorf("%w: the filter chose no tensor of %s", ErrNotTrainable, modelPath)
	}
	types := make([]string, 0, len(count))
	for k := range count {
		types = append(types, k)
	}
	sort.Slice(types, func(i, j int) bool {
		if count[types[i]] != count[types[j]] {
			return count[types[i]] > count[types[j]]
		}
		return types[i] < types[j]
	})
	p.BaseType = strings.Join(types, "+")
	if len(p.Convert) > 0 {
		p.CopyBytes = fi.Size() + extra
	}
	return p, nil
}

// RemoveTrainingCopies removes the training copies Distill left in the
// subdirectories of dir (the parametric tier's adapter directories) when
// a crash stopped it before it removed them itself. Call it only when no
// Distill writes there.
func RemoveTrainingCopies(dir string) {
	if dir == "" {
		return
	}
	stale, _ := filepath.Glob(filepath.Join(dir, "*", ".train-*.gguf"))
	for _, p := range stale {
		os.Remove(p)
	}
}

// trainingCopy writes the training copy of the base at modelPath that p
// plans into dir (a temporary file whose name starts with ".train-") and
// returns its path, or modelPath itself when p needs none. The caller
// removes the copy once the Trainer has read it (it loads unmapped).
func trainingCopy(ctx context.Context, modelPath, dir string, p TrainPlan) (string, time.Duration, error) {
	if len(p.Convert) == 0 {
		return modelPath, 0, nil
	}
	t0 := time.Now()
	f, err := os.CreateTemp(dir, ".train-*.gguf")
	if err != nil {
		return "", 0, fmt.Errorf("lora: distill: training copy: %w", err)
	}
	path := f.Name()
	f.Close()
	_, err = llama.ConvertGGUF(ctx, modelPath, path, func(t llama.TensorInfo) int {
		if slices.Contains(p.Convert, t.Name) {
			return llama.TypeF32
		}
		return t.Type
	}, nil)
	if err != nil {
		os.Remove(path)
		return "", 0, fmt.Errorf("lora: distill: training copy of %s in %s: %w", filepath.Base(modelPath), dir, err)
	}
	return path, time.Since(t0), nil
}
