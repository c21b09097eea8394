package lora

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/memosrt/memosrt/internal/half"

	"github.com/ollama/ollama/fs/ggml"

	"github.com/memosrt/memosrt/internal/atomicfile"
)

// TensorData is one tensor for WriteFile.
type TensorData struct {
	Name  string
	Shape []uint64 // ne0 first
	// Type is "f32" (default), "f16", or "i32" (written as zeros; only
	// useful to test that Inspect refuses it).
	Type string
	// Data holds the values, row-major over Shape (ne0 fastest); nil writes
	// zeros. Its length must be the product of Shape.
	Data []float32
}

// WriteFile writes a GGUF with the metadata meta (string, float32, uint32,
// int32, bool or []int32/[]uint32 values) and tensors to path, through a
// temporary file renamed onto path. It writes whatever it is given: use it
// to make adapters, valid or deliberately broken. meta must hold
// general.architecture (the GGUF writer needs it); keys not starting with
// "general.", "adapter." or "tokenizer." get the architecture prefixed.
func WriteFile(path string, meta map[string]any, tensors []TensorData) (err error) {
	kv := ggml.KV{}
	for k, v := range meta {
		kv[k] = v
	}
	var ts []*ggml.Tensor
	for _, t := range tensors {
		n := uint64(1)
		for _, d := range t.Shape {
			n *= d
		}
		if t.Data != nil && uint64(len(t.Data)) != n {
			return fmt.Errorf("lora: tensor %s: %d values for shape %v", t.Name, len(t.Data), t.Shape)
		}
		kind := ggml.TensorTypeF32
		switch t.Type {
		case "", "f32":
		case "f16":
			kind = ggml.TensorTypeF16
		case "i32":
			kind = ggml.TensorTypeI32
		default:
			return fmt.Errorf("lora: tensor %s: type %q, want f32, f16 or i32", t.Name, t.Type)
		}
		ts = append(ts, &ggml.Tensor{Name: t.Name, Kind: uint32(kind), Shape: slices.Clone(t.Shape),
			WriterTo: tensorWriter{n: n, kind: kind, data: t.Data}})
	}
	err = atomicfile.Write(path, 0o644, func(f *os.File) error { return ggml.WriteGGUF(f, kv, ts) })
	if err != nil {
		return fmt.Errorf("lora: write %s: %w", path, err)
	}
	return nil
}

type tensorWriter struct {
	n    uint64
	kind ggml.TensorType
	data []float32
}

func (t tensorWriter) WriteTo(w io.Writer) (int64, error) {
	size := uint64(4)
	if t.kind == ggml.TensorTypeF16 {
		size = 2
	}
	buf := make([]byte, t.n*size)
	for i := uint64(0); t.data != nil && i < t.n; i++ {
		switch t.kind {
		case ggml.TensorTypeF32:
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(t.data[i]))
		case ggml.TensorTypeF16:
			binary.LittleEndian.PutUint16(buf[2*i:], half.Bits(t.data[i]))
		}
	}
	n, err := w.Write(buf)
	return int64(n), err
}

// RandomSpec shapes a random adapter for WriteRandom. Zero means the default.
type RandomSpec struct {
	// Rank r of every pair. Default 4.
	Rank int
	// Alpha is adapter.lora.alpha. Default Rank, so the effective scale
	// Scale·Alpha/r is the request's Scale.
	Alpha float32
	// Targets are the per-layer weights to adapt, by their name inside a
	// block ("attn_q" adapts blk.N.attn_q.weight). Default attn_q, attn_v.
	Targets []string
	// Std is the standard deviation of B's entries; A's are N(0, 1/n_in) so
	// that A·x keeps the scale of x. Default 0.05.
	Std float32
	// Seed makes the values; equal specs and seeds give identical files.
	Seed uint64
}

// WriteRandom writes a random LoRA adapter for the base model GGUF at base to
// path: for every block N and target T whose blk.N.T.weight the base model
// has (shape [n_in, n_out]), blk.N.T.weight.lora_a [n_in, r] and
// blk.N.T.weight.lora_b [r, n_out] in f32, with general.type "adapter",
// adapter.type "lora" and the base model's general.architecture
// (llama.cpp's LoRA GGUF layout, as convert_lora_to_gguf.py writes it).
func WriteRandom(ctx context.Context, path, base string, spec RandomSpec) error {
	b, err := ReadBase(base)
	if err != nil {
		return err
	}
	if spec.Rank == 0 {
		spec.Rank = 4
	}
	if spec.Alpha == 0 {
		spec.Alpha = float32(spec.Rank)
	}
	if len(spec.Targets) == 0 {
		spec.Targets = []string{"attn_q", "attn_v"}
	}
	if spec.Std == 0 {
		spec.Std = 0.05
	}
	if spec.Rank < 0 {
		return fmt.Errorf("lora: rank %d < 0", spec.Rank)
	}
	r := uint64(spec.Rank)
	var ts []TensorData
	for blk := 0; ; blk++ {
		found := false
		for _, tg := range spec.Targets {
			if err := ctx.Err(); err != nil {
				return err
			}
			name := fmt.Sprintf("blk.%d.%s.weight", blk, tg)
			w, ok := b.Shapes[name]
			if !ok {
				continue
			}
			found = true
			if len(w) != 2 {
				return fmt.Errorf("lora: base tensor %s has shape %v, want a matrix", name, w)
			}
			nIn, nOut := w[0], w[1]
			ts = append(ts,
				TensorData{Name: name + ".lora_a", Shape: []uint64{nIn, r}, Data: normals(spec.Seed, name+".lora_a", int(nIn*r), 1/math.Sqrt(float64(nIn)))},
				TensorData{Name: name + ".lora_b", Shape: []uint64{r, nOut}, Data: normals(spec.Seed, name+".lora_b", int(r*nOut), float64(spec.Std))})
		}
		if !found {
			break
		}
	}
	if len(ts) == 0 {
		return fmt.Errorf("lora: base model %s has none of the targets %v", base, spec.Targets)
	}
	meta := map[string]any{
		"general.architecture": b.Arch,
		"general.type":         "adapter",
		"general.name":         "memosrt-random-lora",
		"adapter.type":         "lora",
		"adapter.lora.alpha":   spec.Alpha,
	}
	return WriteFile(path, meta, ts)
}

// normals returns n values N(0, std) from a generator seeded by seed and name.
func normals(seed uint64, name string, n int, std float64) []float32 {
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * std)
	}
	return out
}
