package llama

import (
	"errors"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// The tokenizer matches the reference tokenizations that llama.cpp's own
// test-tokenizer-0 checks (models/ggml-vocab-*.gguf with .inp/.out pairs).
func TestTokenizerReference(t *testing.T) {
	Init("")
	for _, name := range []string{"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf", "ggml-vocab-phi-3.gguf"} {
		t.Run(name, func(t *testing.T) {
			path := testmodels.Path(t, name)
			inp, err := os.ReadFile(path + ".inp")
			if err != nil {
				t.Fatal(err)
			}
			outp, err := os.ReadFile(path + ".out")
			if err != nil {
				t.Fatal(err)
			}
			texts := strings.Split(strings.TrimSuffix(string(inp), "\n__ggml_vocab_test__\n"), "\n__ggml_vocab_test__\n")
			lines := strings.Split(strings.TrimSuffix(string(outp), "\n"), "\n")
			if len(texts) != len(lines) {
				t.Fatalf("%d inputs, %d outputs", len(texts), len(lines))
			}
			m, err := LoadModel(path, ModelParams{VocabOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for i, text := range texts {
				got, err := m.Tokenize(text, false, false)
				if err != nil {
					t.Fatal(err)
				}
				var want []Token
				for _, f := range strings.Fields(lines[i]) {
					n, _ := strconv.Atoi(f)
					want = append(want, Token(n))
				}
				if len(got) != len(want) {
					t.Errorf("%q: got %v, want %v", text, got, want)
					continue
				}
				for k := range got {
					if got[k] != want[k] {
						t.Errorf("%q: got %v, want %v", text, got, want)
						break
					}
				}
			}
		})
	}
}

func TestChatTemplate(t *testing.T) {
	Init("")
	m, err := LoadModel(testmodels.Path(t, "ggml-vocab-phi-3.gguf"), ModelParams{VocabOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.ChatTemplate() == "" {
		t.Fatal("phi-3 vocab has a chat template")
	}
	msgs := []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}}
	got, err := m.ApplyChatTemplate("chatml", msgs, true)
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("chatml:\n%q\nwant\n%q", got, want)
	}
	phi, err := m.ApplyChatTemplate("", msgs[1:], true)
	if err != nil || !strings.Contains(phi, "<|user|>") || !strings.HasSuffix(phi, "<|assistant|>\n") {
		t.Fatalf("phi-3 template: %q, %v", phi, err)
	}
	if _, err := m.ApplyChatTemplate("{% no such template %}", msgs, true); err == nil {
		t.Fatal("unknown template accepted")
	}
}

// A negative repeat window is refused with ErrBadParams instead of slicing
// the history out of range (Ollama's -1 is resolved by callers).
func TestSamplerBadRepeatLastN(t *testing.T) {
	Init("")
	m, err := LoadModel(testmodels.Path(t, "stories260K.gguf"), ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, n := range []int{-1, -2, -1 << 40} {
		s, err := NewSampler(m, SamplerParams{RepeatPenalty: 1.1, RepeatLastN: n}, []Token{1, 2, 3})
		if !errors.Is(err, ErrBadParams) || s != nil {
			t.Fatalf("RepeatLastN %d: sampler %v, err %v; want ErrBadParams", n, s, err)
		}
	}
	s, err := NewSampler(m, SamplerParams{RepeatPenalty: 1.1, RepeatLastN: 1 << 20}, []Token{1, 2, 3})
	if err != nil {
		t.Fatalf("a window longer than the history: %v", err)
	}
	s.Close()
}

// Every method of a closed Model, Ctx, Batch, Sampler or Adapter is safe:
// errors are ErrClosed, other results zero values, nothing touches freed
// C memory; Close is idempotent.
func TestClosedObjects(t *testing.T) {
	Init("")
	m, err := LoadModel(testmodels.Path(t, "stories260K.gguf"), ModelParams{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewContext(m, ContextParams{NCtx: 256, NSeqMax: 2, Threads: 2, TypeK: TypeF16, TypeV: TypeF16, KVUnified: true})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBatch(8)
	s, err := NewSampler(m, SamplerParams{Temperature: 0.8, TopK: 10, RepeatPenalty: 1.1}, []Token{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	b.Add(m.BOS(), 0, 0, true)
	if err := c.Decode(b); err != nil {
		t.Fatal(err)
	}
	for _, x := range []interface{ Close() error }{s, b, c, m} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		if err := x.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	check := func(name string, err error) {
		t.Helper()
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	_, err = m.Tokenize("x", true, true)
	check("Model.Tokenize", err)
	_, err = NewContext(m, ContextParams{})
	check("NewContext", err)
	_, err = LoadAdapter(m, "x")
	check("LoadAdapter", err)
	if m.BOS() != -1 || m.EOS() != -1 || !m.IsEOG(5) || m.AddBOS() || m.TokenPiece(5, false) != nil || m.Detokenize([]Token{5}) != "" ||
		m.ChatTemplate() != "" || m.Shape() != (Shape{}) {
		t.Error("a closed model's accessors return live values")
	}
	if _, ok := m.Meta("general.architecture"); ok {
		t.Error("Meta of a closed model")
	}
	check("Batch.Add", b.Add(1, 0, 0, false))
	b.Clear()
	check("Ctx.Decode", c.Decode(NewBatch(1)))
	check("Ctx.SeqCopy", c.SeqCopy(0, 1, 0, -1))
	check("Ctx.SeqShift", c.SeqShift(0, 0, -1, 1))
	_, err = c.StateSeqGet(0)
	check("Ctx.StateSeqGet", err)
	check("Ctx.StateSeqSet", c.StateSeqSet(0, []byte{1}))
	check("Ctx.SetAdapter", c.SetAdapter(&Adapter{}, 1))
	_, err = s.Sample(c, 0)
	check("Sampler.Sample", err)
	s.Reset()
	c.SetAbort(true)
	c.SetThreads(1, 1)
	c.ClearMemory()
	c.ClearAdapters()
	c.RemoveAdapter(&Adapter{})
	c.SeqKeep(0)
	if c.NCtx() != 0 || c.NSeqMax() != 0 || c.SeqRemove(0, 0, -1) || c.SeqPosMax(0) != -1 || c.SeqPosMin(0) != -1 ||
		c.StateSeqSize(0) != 0 || c.Logits(0, nil) != nil || c.Embeddings(0, 4) != nil {
		t.Error("a closed context's accessors return live values")
	}
	var a *Adapter
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// MissingCPUFeatures names exactly the extensions that /proc/cpuinfo lists
// and SystemInfo (ggml's compiled-in features) lacks: under go test's
// default CGO_CFLAGS (no -march) on an AVX2 machine, AVX2 among them; under
// make's -march=native, none.
func TestMissingCPUFeatures(t *testing.T) {
	Init("")
	got := MissingCPUFeatures()
	t.Logf("missing %v; %s", got, SystemInfo())
	if goruntime.GOARCH != "amd64" {
		if got != nil {
			t.Fatalf("%v on %s", got, goruntime.GOARCH)
		}
		return
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip(err)
	}
	var flags []string
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = strings.Fields(v)
			break
		}
	}
	info := SystemInfo()
	var want []string
	for _, f := range []struct{ name, flag string }{{"AVX", "avx"}, {"AVX2", "avx2"}, {"FMA", "fma"}, {"F16C", "f16c"}, {"AVX512", "avx512f"}} {
		if slices.Contains(flags, f.flag) && !strings.Contains(info, " "+f.name+" = 1 ") {
			want = append(want, f.name)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("MissingCPUFeatures %v, want %v (cpuinfo flags vs %q)", got, want, info)
	}
}
