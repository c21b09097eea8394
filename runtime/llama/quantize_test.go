package llama

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// greedy decodes n tokens after prompt greedily on a fresh context of m.
func greedy(t *testing.T, m *Model, prompt string, n int) []Token {
	t.Helper()
	c, err := NewContext(m, ContextParams{NCtx: 128, NBatch: 64, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks, err := m.Tokenize(prompt, true, false)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch(64)
	defer b.Close()
	for i, tok := range toks {
		if err := b.Add(tok, i, 0, i == len(toks)-1); err != nil {
			t.Fatal(err)
		}
	}
	var out []Token
	var buf []float32
	last := len(toks) - 1
	for len(out) < n {
		if err := c.Decode(b); err != nil {
			t.Fatal(err)
		}
		buf = c.Logits(last, buf)
		next := Token(0)
		for i, v := range buf {
			if v > buf[next] {
				next = Token(i)
			}
		}
		out = append(out, next)
		b.Clear()
		if err := b.Add(next, len(toks)+len(out)-1, 0, true); err != nil {
			t.Fatal(err)
		}
		last = 0
	}
	return out
}

// Quantize writes stories260K in each type: the file loads, its weights
// have the types llama.cpp's quantizer chooses (or the fallback's), and
// it generates. F16 keeps F32's greedy tokens for this prompt; the
// quantized files' tokens are compared with themselves only (a second
// run of the same file decodes the same).
func TestQuantize(t *testing.T) {
	Init("")
	src := testmodels.Stories(t)
	dir := t.TempDir()
	m32, err := LoadModel(src, ModelParams{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m32.Close()
	const prompt = "Once upon a time, Lily"
	want := greedy(t, m32, prompt, 24)
	cases := []struct {
		typ      string
		fallback bool
		weights  map[string]string // tensor → type
	}{
		{"f16", false, map[string]string{"blk.4.attn_q.weight": "f16", "blk.4.ffn_down.weight": "f16", "output.weight": "f16", "blk.4.ffn_norm.weight": "f32"}},
		{"q8_0", true, map[string]string{"blk.4.attn_q.weight": "q8_0", "blk.4.ffn_down.weight": "f16", "output.weight": "q8_0", "token_embd.weight": "q8_0", "blk.4.ffn_norm.weight": "f32"}},
		{"q4_0", true, map[string]string{"blk.4.attn_q.weight": "q4_0", "blk.4.ffn_down.weight": "f16", "output.weight": "q4_0", "blk.4.ffn_norm.weight": "f32"}},
		// llama.cpp's own K-quant fallback: 64-value rows are not whole
		// 256-value blocks, so q4_K becomes q5_0, q6_K q8_0, and the
		// 172-value rows f16.
		{"q4_k_m", false, map[string]string{"blk.4.attn_q.weight": "q5_0", "blk.4.ffn_down.weight": "f16", "output.weight": "q8_0", "blk.4.ffn_norm.weight": "f32"}},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			out := filepath.Join(dir, tc.typ+".gguf")
			res, err := Quantize(context.Background(), src, out, QuantizeOptions{Type: tc.typ, Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			if res.Fallback != tc.fallback {
				t.Fatalf("fallback %v, want %v (kept %v)", res.Fallback, tc.fallback, res.Kept)
			}
			if tc.fallback && !slices.Equal(res.Kept, []string{"blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "blk.2.ffn_down.weight", "blk.3.ffn_down.weight", "blk.4.ffn_down.weight"}) {
				t.Fatalf("kept %v in f16", res.Kept)
			}
			ts, err := ReadTensors(out)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, x := range ts {
				got[x.Name] = TypeName(x.Type)
			}
			for name, typ := range tc.weights {
				if got[name] != typ {
					t.Errorf("%s is %s, want %s", name, got[name], typ)
				}
			}
			m, err := LoadModel(out, ModelParams{UseMmap: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			toks := greedy(t, m, prompt, 24)
			if tc.typ == "f16" && !slices.Equal(toks, want) {
				t.Errorf("f16 greedy %v, f32 %v", toks, want)
			}
			if again := greedy(t, m, prompt, 24); !slices.Equal(toks, again) {
				t.Errorf("second decode %v, first %v", again, toks)
			}
			t.Logf("%s: %d bytes, greedy %q (f32: %q)", tc.typ, res.Bytes, m.Detokenize(toks), m32.Detokenize(want))
		})
	}
	t.Run("unknown type", func(t *testing.T) {
		_, err := Quantize(context.Background(), src, filepath.Join(dir, "x.gguf"), QuantizeOptions{Type: "q9_9"})
		if !errors.Is(err, ErrConvert) {
			t.Fatalf("err %v, want ErrConvert", err)
		}
	})
}

// ConvertGGUF dequantizes chosen tensors to f32 exactly: the values are
// ggml's dequantization of the source's, every other tensor keeps its
// bytes, and a conversion ggml cannot do is refused before anything is
// written.
func TestConvertGGUF(t *testing.T) {
	Init("")
	dir := t.TempDir()
	q8 := filepath.Join(dir, "q8.gguf")
	if _, err := Quantize(context.Background(), testmodels.Stories(t), q8, QuantizeOptions{Type: "q8_0", Threads: 1}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "copy.gguf")
	st, err := ConvertGGUF(context.Background(), q8, out, func(ti TensorInfo) int {
		if ti.Name == "blk.4.attn_q.weight" || ti.Name == "blk.4.ffn_down.weight" {
			return TypeF32
		}
		return ti.Type
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.Converted, []string{"blk.4.attn_q.weight", "blk.4.ffn_down.weight"}) {
		t.Fatalf("converted %v", st.Converted)
	}
	ts, err := ReadTensors(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ts {
		want := map[string]string{"blk.4.attn_q.weight": "f32", "blk.4.ffn_down.weight": "f32", "blk.3.attn_q.weight": "q8_0", "output.weight": "q8_0"}[x.Name]
		if want != "" && TypeName(x.Type) != want {
			t.Errorf("%s is %s, want %s", x.Name, TypeName(x.Type), want)
		}
	}
	// the copy computes what the original does: greedy tokens equal
	// (the f32 rows hold the q8_0 rows' exact values; only ggml's
	// activation rounding in the quantized matmul differs)
	mq, err := LoadModel(q8, ModelParams{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mq.Close()
	mc, err := LoadModel(out, ModelParams{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	a, b := greedy(t, mq, "Once upon a time", 16), greedy(t, mc, "Once upon a time", 16)
	if !slices.Equal(a, b) {
		t.Errorf("copy greedy %v, original %v", b, a)
	}
	t.Run("refused", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.gguf")
		_, err := ConvertGGUF(context.Background(), q8, bad, func(ti TensorInfo) int {
			if ti.Name == "blk.4.ffn_down.weight" {
				return TypeQ8_0 // 172-value rows
			}
			return ti.Type
		}, nil)
		if !errors.Is(err, ErrConvert) {
			t.Fatalf("err %v, want ErrConvert", err)
		}
		if _, err := ReadTensors(bad); err == nil {
			t.Fatal("a refused conversion left a file")
		}
	})
}
