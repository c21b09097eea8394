package gguf

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/internal/half"

	"github.com/ollama/ollama/fs/ggml"

	"github.com/memosrt/memosrt/runtime/llama"
)

// testModel returns the path of a model from the shared test models
// (shared/models in the checkout, or beside it).
func testModel(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"../../shared/models", "../../../shared/models"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("test model %s not found in shared/models", name)
	return ""
}

// write writes spec to a new file in t.TempDir() and returns its path.
func write(t *testing.T, spec Spec, seed int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "model.gguf")
	if err := Write(t.Context(), path, spec, testModel(t, "llama-2-tiny-random.gguf"), seed); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return path
}

// loadModel loads path with llama.cpp and closes it when the test ends.
func loadModel(t *testing.T, path string, p llama.ModelParams) *llama.Model {
	t.Helper()
	llama.Init("")
	m, err := llama.LoadModel(path, p)
	if err != nil {
		t.Fatalf("LoadModel(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Model.Close: %v", err)
		}
	})
	return m
}

func TestWriteLoadsInLlama(t *testing.T) {
	spec := Presets["tiny"]
	m := loadModel(t, write(t, spec, 1), llama.ModelParams{})

	sh := m.Shape()
	got := Spec{NLayer: sh.NLayer, NEmbd: sh.NEmbd, NHead: sh.NHead, NHeadKV: sh.NHeadKV, NVocab: sh.NVocab, NCtxTrain: sh.NCtxTrain}
	want := Spec{NLayer: spec.NLayer, NEmbd: spec.NEmbd, NHead: spec.NHead, NHeadKV: spec.NHeadKV, NVocab: spec.NVocab, NCtxTrain: spec.NCtxTrain}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Shape() = %+v, want %+v", got, want)
	}
	if sh.NParams != spec.NParams() {
		t.Errorf("Shape().NParams = %d, want Spec.NParams() = %d", sh.NParams, spec.NParams())
	}
	// f16 matrices, f32 norms: 2 bytes a weight plus 2 more per norm weight.
	if wantBytes := 2*spec.NParams() + 2*uint64(spec.NEmbd*(2*spec.NLayer+1)); sh.SizeBytes != wantBytes {
		t.Errorf("Shape().SizeBytes = %d, want %d", sh.SizeBytes, wantBytes)
	}
	for _, kv := range [][2]string{
		{"general.architecture", "llama"},
		{"general.name", "random-llama-tiny"},
		{"llama.feed_forward_length", "128"},
		{"llama.rope.dimension_count", "16"},
		{"tokenizer.ggml.model", "llama"},
	} {
		if v, ok := m.Meta(kv[0]); !ok || v != kv[1] {
			t.Errorf("Meta(%q) = %q, %v; want %q", kv[0], v, ok, kv[1])
		}
	}

	ref := loadModel(t, testModel(t, "llama-2-tiny-random.gguf"), llama.ModelParams{VocabOnly: true})
	toks, err := m.Tokenize("Hello world", true, false)
	if err != nil {
		t.Fatal(err)
	}
	refToks, err := ref.Tokenize("Hello world", true, false)
	if err != nil {
		t.Fatal(err)
	}
	// Llama 2 SPM: <s>=1, "▁Hello"=15043, "▁world"=3186.
	if want := []llama.Token{1, 15043, 3186}; !slices.Equal(toks, want) || !slices.Equal(refToks, want) {
		t.Errorf("Tokenize(\"Hello world\") = %v, reference model %v; want %v", toks, refToks, want)
	}

	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64, NBatch: 16, Threads: 2, TypeK: llama.TypeF16, TypeV: llama.TypeF16})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := llama.NewBatch(16)
	defer b.Close()
	for i, tok := range toks {
		if err := b.Add(tok, i, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Decode(b); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	for i := range toks {
		logits := c.Logits(i, nil)
		if len(logits) != spec.NVocab {
			t.Fatalf("Logits(%d) has %d values, want %d", i, len(logits), spec.NVocab)
		}
		nonzero := 0
		for j, v := range logits {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("Logits(%d)[%d] = %v", i, j, v)
			}
			if v != 0 {
				nonzero++
			}
		}
		if nonzero == 0 {
			t.Errorf("Logits(%d) are all zero", i)
		}
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// The BERT preset with bge's WordPiece tokenizer loads in llama.cpp as an
// encoder with mean pooling: its shape and keys are the spec's, the
// tokenizer adds [CLS] and [SEP], and a decode with embeddings on gives one
// finite, non-zero pooled vector of n_embd values.
func TestBERTLoadsInLlama(t *testing.T) {
	spec := Presets["bert-tiny"]
	path := filepath.Join(t.TempDir(), "bert.gguf")
	if err := Write(t.Context(), path, spec, testModel(t, "ggml-vocab-bert-bge.gguf"), 1); err != nil {
		t.Fatal(err)
	}
	m := loadModel(t, path, llama.ModelParams{})
	sh := m.Shape()
	if sh.NLayer != 2 || sh.NEmbd != 64 || sh.NHead != 4 || sh.NHeadKV != 4 || sh.NVocab != 30522 || sh.NCtxTrain != 512 {
		t.Errorf("Shape() = %+v", sh)
	}
	if sh.NParams != spec.NParams() {
		t.Errorf("Shape().NParams = %d, want Spec.NParams() = %d", sh.NParams, spec.NParams())
	}
	for _, kv := range [][2]string{
		{"general.architecture", "bert"},
		{"general.name", "random-bert-tiny"},
		{"bert.pooling_type", "1"},
		{"bert.attention.causal", "false"},
		{"tokenizer.ggml.model", "bert"},
		{"tokenizer.ggml.token_type_count", "2"},
	} {
		if v, ok := m.Meta(kv[0]); !ok || v != kv[1] {
			t.Errorf("Meta(%q) = %q, %v; want %q", kv[0], v, ok, kv[1])
		}
	}
	toks, err := m.Tokenize("Hello world", true, false)
	if err != nil {
		t.Fatal(err)
	}
	// bert-base-uncased WordPiece: [CLS]=101, "hello"=7592, "world"=2088, [SEP]=102.
	if want := []llama.Token{101, 7592, 2088, 102}; !slices.Equal(toks, want) {
		t.Errorf("Tokenize(\"Hello world\") = %v, want %v", toks, want)
	}
	c, err := llama.NewContext(m, llama.ContextParams{NCtx: 64, NBatch: 64, NUBatch: 64, Threads: 2,
		TypeK: llama.TypeF16, TypeV: llama.TypeF16, Embeddings: true, Pooling: llama.PoolingUnspecified})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PoolingType() != llama.PoolingMean {
		t.Errorf("PoolingType() = %d, want mean (%d)", c.PoolingType(), llama.PoolingMean)
	}
	b := llama.NewBatch(64)
	defer b.Close()
	for i, tok := range toks {
		if err := b.Add(tok, i, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Decode(b); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	v := c.Embeddings(0, sh.NEmbd)
	if len(v) != 64 {
		t.Fatalf("Embeddings = %d values, want 64", len(v))
	}
	nonzero := 0
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("Embeddings[%d] = %v", i, x)
		}
		if x != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Error("Embeddings are all zero")
	}
}

func TestWriteDeterministic(t *testing.T) {
	spec := Presets["tiny"]
	a, b, c := write(t, spec, 7), write(t, spec, 7), write(t, spec, 8)
	if fileSum(t, a) != fileSum(t, b) {
		t.Errorf("two files with seed 7 differ")
	}
	if fileSum(t, a) == fileSum(t, c) {
		t.Errorf("files with seeds 7 and 8 are identical")
	}
}

// TestWriteContents reads the file back with ollama's decoder: keys, tensor
// names, shapes and types, and the values of a norm and a weight tensor.
func TestWriteContents(t *testing.T) {
	spec := Spec{NLayer: 1, NEmbd: 32, NHead: 2, NHeadKV: 1, NFF: 48, NCtxTrain: 256, FileType: "f16"}
	path := write(t, spec, 3)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := ggml.Decode(f, -1)
	if err != nil {
		t.Fatal(err)
	}
	kv := g.KV()
	for k, want := range map[string]any{
		"general.architecture":                   "llama",
		"general.name":                           "memosrt-random",
		"general.file_type":                      uint32(ggml.FileTypeF16),
		"general.parameter_count":                uint64(2*32*32000 + 32 + 2*32 + 2*32*32 + 2*32*16 + 3*32*48),
		"llama.block_count":                      uint32(1),
		"llama.context_length":                   uint32(256),
		"llama.embedding_length":                 uint32(32),
		"llama.feed_forward_length":              uint32(48),
		"llama.attention.head_count":             uint32(2),
		"llama.attention.head_count_kv":          uint32(1),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(16),
		"llama.rope.freq_base":                   float32(10000),
		"llama.vocab_size":                       uint32(32000),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.unknown_token_id":        uint32(0),
	} {
		if got := kv[k]; got != want {
			t.Errorf("%s = %v (%T), want %v (%T)", k, got, got, want, want)
		}
	}
	if n := len(kv.Strings("tokenizer.ggml.tokens")); n != 32000 {
		t.Errorf("tokenizer.ggml.tokens has %d entries, want 32000", n)
	}
	if n := len(kv.Floats("tokenizer.ggml.scores")); n != 32000 {
		t.Errorf("tokenizer.ggml.scores has %d entries, want 32000", n)
	}

	type info struct {
		name  string
		kind  uint32
		shape []uint64
	}
	var got []info
	tensors := map[string]*ggml.Tensor{}
	for _, tt := range g.Tensors().Items() {
		got = append(got, info{tt.Name, tt.Kind, tt.Shape})
		tensors[tt.Name] = tt
	}
	f16, f32 := uint32(ggml.TensorTypeF16), uint32(ggml.TensorTypeF32)
	want := []info{ // WriteGGUF order: blocks first, then by name
		{"blk.0.attn_k.weight", f16, []uint64{32, 16}},
		{"blk.0.attn_norm.weight", f32, []uint64{32}},
		{"blk.0.attn_output.weight", f16, []uint64{32, 32}},
		{"blk.0.attn_q.weight", f16, []uint64{32, 32}},
		{"blk.0.attn_v.weight", f16, []uint64{32, 16}},
		{"blk.0.ffn_down.weight", f16, []uint64{48, 32}},
		{"blk.0.ffn_gate.weight", f16, []uint64{32, 48}},
		{"blk.0.ffn_norm.weight", f32, []uint64{32}},
		{"blk.0.ffn_up.weight", f16, []uint64{32, 48}},
		{"output.weight", f16, []uint64{32, 32000}},
		{"output_norm.weight", f32, []uint64{32}},
		{"token_embd.weight", f16, []uint64{32, 32000}},
	}
	if !slices.EqualFunc(got, want, func(a, b info) bool {
		return a.name == b.name && a.kind == b.kind && slices.Equal(a.shape, b.shape)
	}) {
		t.Errorf("tensors = %v\nwant %v", got, want)
	}

	read := func(name string) []byte {
		tt := tensors[name]
		buf := make([]byte, tt.Size())
		if _, err := f.ReadAt(buf, int64(g.Tensors().Offset+tt.Offset)); err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		return buf
	}
	for i, b := range slices.Collect(slices.Chunk(read("output_norm.weight"), 4)) {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(b)); v != 1 {
			t.Fatalf("output_norm.weight[%d] = %v, want 1", i, v)
		}
	}
	// token_embd: 1,024,000 f16 values from N(0, 0.02) truncated at 4.3 std.
	var sum, sq float64
	emb := read("token_embd.weight")
	for b := range slices.Chunk(emb, 2) {
		v := f16Float(binary.LittleEndian.Uint16(b))
		if math.Abs(v) > 4.5*WeightStd {
			t.Fatalf("token_embd value %v beyond 4.5 std", v)
		}
		sum += v
		sq += v * v
	}
	n := float64(len(emb) / 2)
	mean, std := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	// Standard error of the mean is 0.02/sqrt(1.024e6) = 2e-5; allow 5 of them.
	if math.Abs(mean) > 1e-4 || math.Abs(std-WeightStd) > 2e-4 {
		t.Errorf("token_embd mean %v std %v, want 0 and %v", mean, std, WeightStd)
	}
}

// f16Float decodes IEEE 754 binary16 bits (finite values only).
func f16Float(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp, m := int(h>>10&0x1f), float64(h&0x3ff)
	if exp == 0 {
		return sign * m * 0x1p-24
	}
	return sign * (1 + m/1024) * math.Ldexp(1, exp-15)
}

func TestF16Bits(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{0.02, 0x251f},
		{65504, 0x7bff},
		{65520, 0x7c00},
		{0x1p-14, 0x0400},
		{0x1p-24, 0x0001},
		{0x1p-25, 0x0000},        // halfway to zero: rounds to even
		{1 + 0x1p-11, 0x3c00},    // halfway between 1 and the next half: even
		{1 + 3*0x1p-11, 0x3c02},  // halfway, odd below: rounds up
		{4095 * 0x1p-12, 0x3c00}, // halfway, odd: the carry bumps the exponent
		{float32(0.0999755859375), 0x2e66},
	} {
		if got := half.Bits(tc.in); got != tc.want {
			t.Errorf("half.Bits(%g) = %#04x, want %#04x", tc.in, got, tc.want)
		}
		if tc.want != 0x7c00 {
			if back := f16Float(tc.want); math.Abs(back-float64(tc.in)) > math.Abs(float64(tc.in))*0x1p-11+0x1p-25 {
				t.Errorf("f16Float(%#04x) = %g, not within half an ulp of %g", tc.want, back, tc.in)
			}
		}
	}
}

func TestWriteCancelled(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.gguf")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Write(ctx, path, Presets["tiny"], testModel(t, "llama-2-tiny-random.gguf"), 1)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Write with a cancelled context = %v, want context.Canceled", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("directory holds %d entries after a cancelled Write (first %s), want none", len(ents), ents[0].Name())
	}
}

func TestWriteReplacesWhole(t *testing.T) {
	path := write(t, Presets["tiny"], 1)
	small := Spec{NLayer: 1, NEmbd: 16, NHead: 2, NHeadKV: 2, NFF: 32, NCtxTrain: 64}
	if err := Write(t.Context(), path, small, testModel(t, "llama-2-tiny-random.gguf"), 1); err != nil {
		t.Fatal(err)
	}
	fresh := write(t, small, 1)
	if fileSum(t, path) != fileSum(t, fresh) {
		t.Errorf("overwritten file differs from a fresh one")
	}
}

func TestWriteErrors(t *testing.T) {
	tok := testModel(t, "llama-2-tiny-random.gguf")
	tiny := Presets["tiny"]
	with := func(f func(*Spec)) Spec { s := tiny; f(&s); return s }
	for _, tc := range []struct {
		name    string
		spec    Spec
		tokFrom string
		want    error
		nErrs   int
	}{
		{"zero spec", Spec{}, tok, ErrBadSpec, 6},
		{"n_embd not multiple of n_head", with(func(s *Spec) { s.NHead = 3 }), tok, ErrBadSpec, 2},
		{"odd head size", with(func(s *Spec) { s.NEmbd = 68 }), tok, ErrBadSpec, 1},
		{"n_head not multiple of n_head_kv", with(func(s *Spec) { s.NHeadKV = 3 }), tok, ErrBadSpec, 1},
		{"file type", with(func(s *Spec) { s.FileType = "q4_0" }), tok, ErrBadSpec, 1},
		{"architecture", with(func(s *Spec) { s.Arch = "gpt2" }), tok, ErrBadSpec, 1},
		{"bert with gqa", with(func(s *Spec) { s.Arch = ArchBERT }), tok, ErrBadSpec, 1},
		{"negative vocab", with(func(s *Spec) { s.NVocab = -1 }), tok, ErrBadSpec, 1},
		{"vocab mismatch", with(func(s *Spec) { s.NVocab = 512 }), tok, ErrTokenizer, 1},
		{"missing tokenizer", tiny, filepath.Join(t.TempDir(), "none.gguf"), ErrTokenizer, 1},
		{"tokenizer not gguf", tiny, "gguf_test.go", ErrTokenizer, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := Write(t.Context(), filepath.Join(dir, "m.gguf"), tc.spec, tc.tokFrom, 1)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Write = %v, want %v", err, tc.want)
			}
			n := 1
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				n = len(j.Unwrap())
			}
			if n != tc.nErrs {
				t.Errorf("Write reported %d problems, want %d: %v", n, tc.nErrs, err)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("directory holds %d entries after a failed Write, want none", len(ents))
			}
		})
	}
}

func TestPresets(t *testing.T) {
	for _, tc := range []struct {
		name    string
		nParams uint64
	}{
		// token_embd + output (2*32000*n_embd), output_norm, per layer norms,
		// q/o, k/v (n_embd_kv = n_embd/4) and three FFN matrices.
		{"1b", 2*32000*2048 + 2048 + 16*(2*2048+2*2048*2048+2*2048*512+3*2048*8192)},
		{"8b", 2*32000*4096 + 4096 + 32*(2*4096+2*4096*4096+2*4096*1024+3*4096*14336)},
		{"tiny", 2*32000*64 + 64 + 2*(2*64+2*64*64+2*64*32+3*64*128)},
		// token_embd, token_types (2 rows), position_embd (512 rows), the
		// embedding norm and bias; per layer q/k/v/o with biases, two
		// norms with biases, ffn_up and ffn_down with biases.
		{"bert-tiny", 30522*64 + 2*64 + 512*64 + 2*64 + 2*(4*(64*64+64)+4*64+64*128+128+128*64+64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := Presets[tc.name]
			if !ok {
				t.Fatalf("no preset %q", tc.name)
			}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := s.NParams(); got != tc.nParams {
				t.Errorf("NParams() = %d, want %d", got, tc.nParams)
			}
		})
	}
}

func BenchmarkFill(b *testing.B) {
	td := &tensorData{ctx: context.Background(), n: 64 << 20, kind: ggml.TensorTypeF16, seed: 1, tab: newNormalTables(WeightStd)}
	b.SetBytes(int64(td.n * 2))
	for b.Loop() {
		if _, err := td.WriteTo(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}
