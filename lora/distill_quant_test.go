package lora

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

// quantized writes stories260K in type typ (llama.Quantize) into dir.
func quantized(tb testing.TB, dir, typ string) string {
	tb.Helper()
	p := filepath.Join(dir, "stories260K-"+typ+".gguf")
	if _, err := llama.Quantize(context.Background(), testmodels.Stories(tb), p, llama.QuantizeOptions{Type: typ, Threads: 1}); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Distill on an f16 or quantized base trains on a copy with the last
// block's matrices dequantized: the delta's base is exactly those
// dequantized values, the copy is gone afterwards, and the adapter, on
// the original quantized model, lowers the memories' NLL.
func TestDistillQuantized(t *testing.T) {
	llama.Init("")
	mems := distillMemories[:2]
	for _, c := range []struct {
		typ, base string
		convert   int // tensors the training copy holds in f32
	}{
		{"f16", "f16", 6}, // and output.weight: no f16 kernel in ggml's backward pass
		{"q8_0", "q8_0+f16", 5},
		{"q4_0", "q4_0+f16", 5},
		{"q4_k_m", "q5_0+f16", 5},
	} {
		t.Run(c.typ, func(t *testing.T) {
			dir := t.TempDir()
			model := quantized(t, dir, c.typ)
			plan, err := PlanTraining(model, nil)
			if err != nil {
				t.Fatal(err)
			}
			if plan.BaseType != c.base || len(plan.Convert) != c.convert || plan.CopyBytes <= 0 {
				t.Fatalf("plan %+v; want base %s, %d converted", plan, c.base, c.convert)
			}
			// the RAM estimate counts the training copy, not the file
			ram, err := DistillRAM(model, 2, DistillOptions{Generic: 1})
			if err != nil {
				t.Fatal(err)
			}
			if want := plan.CopyBytes + 3*257*512*4 + 16*(2*64*64+3*64*172); ram != want {
				t.Errorf("DistillRAM %d, want %d", ram, want)
			}
			out := filepath.Join(dir, "out")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			res, err := Distill(context.Background(), model, mems, DistillOptions{Out: filepath.Join(out, "a.gguf"), Epochs: 4, Generic: 1, Threads: 1, KeepDeltas: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: base %s, copy %d bytes in %v, train %v, known %d, loss %.3f→%.3f", c.typ, res.BaseType, res.CopyBytes, res.Copy, res.Train, res.Known, res.LossFirst, res.LossLast)
			if res.BaseType != c.base || res.CopyBytes != plan.CopyBytes {
				t.Errorf("result base %q copy %d, want %q %d", res.BaseType, res.CopyBytes, c.base, plan.CopyBytes)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 1 || ents[0].Name() != "a.gguf" {
				t.Errorf("out dir holds %v, want the adapter alone", ents)
			}
			// the deltas' base is the dequantized weights, exactly
			cp := filepath.Join(dir, "f32.gguf")
			if _, err := llama.ConvertGGUF(context.Background(), model, cp, func(ti llama.TensorInfo) int {
				if slices.Contains(plan.Convert, ti.Name) {
					return llama.TypeF32
				}
				return ti.Type
			}, nil); err != nil {
				t.Fatal(err)
			}
			tr, err := llama.NewTrainer(cp, llama.TrainOptions{Train: DistillWeights(4)})
			if err != nil {
				t.Fatal(err)
			}
			ws, err := tr.Weights()
			tr.Close()
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range ws {
				if d := res.Deltas[i]; d.Name != w.Name || !slices.Equal(d.Base, w.Data) {
					t.Errorf("delta %s: base differs from the dequantized %s", d.Name, w.Name)
				}
			}
			f, err := Inspect(res.Path)
			if err != nil {
				t.Fatal(err)
			}
			bs, err := ReadBase(model)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Check(f, bs); err != nil {
				t.Fatal(err)
			}
			m, ev := evalContext(t, model, 256)
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
				t.Logf("memory %d NLL on the %s model: base %.4f, adapter %.4f", i, c.typ, nb, na)
				if !(na < nb-0.1) {
					t.Errorf("memory %d NLL: base %.4f, adapter %.4f", i, nb, na)
				}
			}
			useAdapter(t, ev, nil)
		})
	}
}

// untrainable writes into dir a copy of stories260K whose
// blk.4.attn_q.weight is declared i32 in the tensor table (the same 4
// bytes per value as its f32 data): ggml has no dequantizer for i32, so
// no type the pinned ggml computes with is refused, but this one is.
func untrainable(tb testing.TB, dir string) string {
	tb.Helper()
	b, err := os.ReadFile(testmodels.Stories(tb))
	if err != nil {
		tb.Fatal(err)
	}
	name := "blk.4.attn_q.weight"
	key := append(binary.LittleEndian.AppendUint64(nil, uint64(len(name))), name...)
	i := bytes.Index(b, key)
	if i < 0 {
		tb.Fatal("no tensor info for " + name)
	}
	at := i + len(key)
	nd := int(binary.LittleEndian.Uint32(b[at:]))
	at += 4 + 8*nd // the type follows the dimensions
	if binary.LittleEndian.Uint32(b[at:]) != uint32(llama.TypeF32) {
		tb.Fatalf("%s is not f32 in stories260K", name)
	}
	i32, ok := llama.TypeByName("i32")
	if !ok {
		tb.Fatal("no i32 type")
	}
	binary.LittleEndian.PutUint32(b[at:], uint32(i32))
	p := filepath.Join(dir, "stories260K-i32.gguf")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// A weight of a type ggml cannot dequantize is refused before anything
// loads, by PlanTraining, DistillRAM and Distill, naming the weight and
// its type.
func TestPlanTrainingRefuses(t *testing.T) {
	llama.Init("")
	p := untrainable(t, t.TempDir())
	const want = "blk.4.attn_q.weight is i32"
	if _, err := PlanTraining(p, nil); !errors.Is(err, ErrNotTrainable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("PlanTraining: %v", err)
	}
	if _, err := DistillRAM(p, 1, DistillOptions{}); !errors.Is(err, ErrNotTrainable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("DistillRAM: %v", err)
	}
	// the f32 model: no copy
	plan, err := PlanTraining(testmodels.Stories(t), nil)
	if err != nil || plan.BaseType != "f32" || len(plan.Convert) != 0 || plan.CopyBytes != 0 || len(plan.Weights) != 5 {
		t.Fatalf("stories260K plan %+v, %v", plan, err)
	}
}
