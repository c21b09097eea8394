package embedding

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/bench/gguf"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

// bert writes the bert-tiny preset (bge's WordPiece tokenizer, seed 1) with
// extra metadata to t.TempDir() and returns its path. Equal seeds give
// equal weights whatever the metadata.
func bert(t *testing.T, meta map[string]any) string {
	t.Helper()
	spec := gguf.Presets["bert-tiny"]
	spec.Meta = meta
	path := filepath.Join(t.TempDir(), "bert.gguf")
	if err := gguf.Write(t.Context(), path, spec, testmodels.Path(t, "ggml-vocab-bert-bge.gguf"), 1); err != nil {
		t.Fatal(err)
	}
	return path
}

// open opens path with 2 threads and checks Close at the test's end.
func open(t *testing.T, path string, o Options) *Model {
	t.Helper()
	o.Threads = 2
	m, err := Open(t.Context(), path, ModelOptions{Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func embed(t *testing.T, m *Model, texts ...string) [][]float32 {
	t.Helper()
	vs, err := m.Embed(t.Context(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != len(texts) {
		t.Fatalf("%d vectors for %d texts", len(vs), len(texts))
	}
	return vs
}

func dot(a, b []float32) (s float64) {
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// A BERT embedding model: n_embd-long unit vectors, one per text in order,
// equal for equal texts and for a batch or one text at a time, different
// for different texts.
func TestBERT(t *testing.T) {
	m := open(t, bert(t, nil), Options{})
	info := m.Info()
	if info.Arch != "bert" || info.Dim != 64 || m.Dim() != 64 || info.Pooling != PoolingMean || info.MaxTokens != 512 {
		t.Fatalf("Info() = %+v", info)
	}
	texts := []string{"Lily has a dog named Max.", "Lily has a dog named Max.", "The sun is hot today.", "", "🐈"}
	vs := embed(t, m, texts...)
	for i, v := range vs {
		if len(v) != 64 {
			t.Fatalf("vector %d has %d values, want 64", i, len(v))
		}
		for j, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("vector %d [%d] = %v", i, j, x)
			}
		}
		if n := dot(v, v); math.Abs(n-1) > 1e-5 {
			t.Errorf("vector %d: norm² %v, want 1", i, n)
		}
	}
	if !slices.Equal(vs[0], vs[1]) {
		t.Error("equal texts gave different vectors")
	}
	for _, pair := range [][2]int{{0, 2}, {0, 3}, {2, 3}, {3, 4}} {
		if c := dot(vs[pair[0]], vs[pair[1]]); c > 0.99 {
			t.Errorf("texts %q and %q: cosine %v, want different vectors", texts[pair[0]], texts[pair[1]], c)
		}
	}
	for i, text := range texts {
		if one := embed(t, m, text); !slices.Equal(one[0], vs[i]) {
			t.Errorf("%q alone differs from its vector in the batch", text)
		}
	}
	if vs, err := m.Embed(t.Context(), nil); err != nil || len(vs) != 0 {
		t.Errorf("no texts: %d vectors, %v", len(vs), err)
	}
}

// The pooling is the GGUF's <arch>.pooling_type: CLS and last-token
// vectors of the same weights differ from the mean ones, 0 (none) pools by
// the mean, and 4 (a reranker's) is refused.
func TestPoolingFromMetadata(t *testing.T) {
	const text = "Lily has a dog named Max."
	mean := embed(t, open(t, bert(t, nil), Options{}), text)[0]
	for _, c := range []struct {
		pooling uint32
		want    int
	}{{0, PoolingMean}, {1, PoolingMean}, {2, PoolingCLS}, {3, PoolingLast}} {
		t.Run(fmt.Sprint(c.pooling), func(t *testing.T) {
			m := open(t, bert(t, map[string]any{"bert.pooling_type": c.pooling}), Options{})
			if m.Info().Pooling != c.want {
				t.Fatalf("Pooling %d, want %d", m.Info().Pooling, c.want)
			}
			v := embed(t, m, text)[0]
			if same := slices.Equal(v, mean); same != (c.want == PoolingMean) {
				t.Errorf("vector equal to the mean-pooled one: %v (cosine %v)", same, dot(v, mean))
			}
		})
	}
	_, err := Open(t.Context(), bert(t, map[string]any{"bert.pooling_type": uint32(4)}), ModelOptions{})
	if !errors.Is(err, ErrPooling) {
		t.Errorf("rank pooling: %v, want ErrPooling", err)
	}
}

// Texts longer than MaxTokens are cut there: two texts equal in their
// first 8 tokens get one vector.
func TestTruncate(t *testing.T) {
	a, b := "one two three four five six seven eight nine ten", "one two three four five six seven eight eleven twelve"
	short := open(t, bert(t, nil), Options{MaxTokens: 8})
	if short.Info().MaxTokens != 8 {
		t.Fatalf("MaxTokens %d", short.Info().MaxTokens)
	}
	if vs := embed(t, short, a, b); !slices.Equal(vs[0], vs[1]) {
		t.Error("texts equal in their first 8 tokens differ at MaxTokens 8")
	}
	if vs := embed(t, open(t, bert(t, nil), Options{}), a, b); slices.Equal(vs[0], vs[1]) {
		t.Error("different texts equal at MaxTokens 512")
	}
	// capped at the training context (512 positions)
	if n := open(t, bert(t, nil), Options{MaxTokens: 4096}).Info().MaxTokens; n != 512 {
		t.Errorf("MaxTokens 4096 gave %d, want 512", n)
	}
}

// Concurrent callers get the vectors one caller gets.
func TestConcurrent(t *testing.T) {
	m := open(t, bert(t, nil), Options{})
	texts := []string{"Lily has a dog.", "The sun is hot today.", "Max likes the park."}
	want := embed(t, m, texts...)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			got, err := m.Embed(context.Background(), texts)
			if err == nil && !slices.EqualFunc(got, want, slices.Equal) {
				err = errors.New("vectors differ")
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A decoder model (stories260K) embeds by the mean of its hidden states.
func TestDecoderModel(t *testing.T) {
	m := open(t, testmodels.Stories(t), Options{})
	if info := m.Info(); info.Arch != "llama" || info.Pooling != PoolingMean || info.Dim != 64 {
		t.Fatalf("Info() = %+v", info)
	}
	vs := embed(t, m, "Lily has a dog.", "Lily has a dog.", "The sun is hot today.")
	if !slices.Equal(vs[0], vs[1]) || slices.Equal(vs[0], vs[2]) {
		t.Error("equal texts differ or different ones are equal")
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "none.gguf"), ModelOptions{}); !errors.Is(err, llama.ErrLoad) {
		t.Errorf("missing file: %v, want llama.ErrLoad", err)
	}
	if _, err := Open(ctx, "x", ModelOptions{Options: Options{MaxTokens: -1, Threads: 600}}); !errors.Is(err, ErrOptions) ||
		err.Error() != "embedding: invalid options: [MaxTokens -1 < 0 Threads 600 not in [0, 512]]" {
		t.Errorf("bad options: %v", err)
	}
	m := open(t, bert(t, nil), Options{})
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Embed(cctx, []string{"a"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Embed(ctx, []string{"a"}); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
