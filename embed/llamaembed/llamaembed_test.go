package llamaembed

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/bench/gguf"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/embedding"
	"github.com/memosrt/memosrt/textmem"
)

// bertFile writes the bert-tiny preset (bge's tokenizer, mean pooling) to
// t.TempDir() and returns its path.
func bertFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bert-tiny.gguf")
	if err := gguf.Write(t.Context(), path, gguf.Presets["bert-tiny"], testmodels.Path(t, "ggml-vocab-bert-bge.gguf"), 1); err != nil {
		t.Fatal(err)
	}
	return path
}

func open(t *testing.T, path string) *Llama {
	t.Helper()
	l, err := Open(t.Context(), path, Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func TestOpen(t *testing.T) {
	l := open(t, bertFile(t))
	if !regexp.MustCompile(`^llama:random-bert-tiny@[0-9a-f]{12}$`).MatchString(l.Name()) || l.Dim() != 64 {
		t.Fatalf("Name %q Dim %d", l.Name(), l.Dim())
	}
	if info := l.Info(); info.Arch != "bert" || info.Pooling != embedding.PoolingMean {
		t.Errorf("Info %+v", info)
	}
	vs, err := l.Embed(t.Context(), []string{"a dog", "a cat", "a dog"})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 || len(vs[0]) != 64 || !slices.Equal(vs[0], vs[2]) || slices.Equal(vs[0], vs[1]) {
		t.Fatalf("vectors %v", vs)
	}
	var n float64
	for _, x := range vs[0] {
		n += float64(x) * float64(x)
	}
	if math.Abs(n-1) > 1e-5 {
		t.Errorf("norm² %v", n)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := Open(ctx, filepath.Join(t.TempDir(), "none.gguf"), Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	// a tokenizer fixture: GGUF, but no weights
	if _, err := Open(ctx, testmodels.Path(t, "ggml-vocab-bert-bge.gguf"), Options{}); !errors.Is(err, runtime.ErrModelFile) {
		t.Errorf("vocab-only file: %v", err)
	}
	l := open(t, bertFile(t))
	l.Close()
	if _, err := l.Embed(ctx, []string{"a"}); !errors.Is(err, embedding.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// Memories of a text store with the BERT model get a vector each, and the
// fused ranking follows them where BM25 alone does not. The query's only
// index terms are "dog" and "house" (the rest are stop words); BM25 ranks
// "house dog house dog" (each term twice) above "the dog of the house"
// (once each, half as long) whatever the collection, as BM25 with b < 1
// does. The second is the query's own text: its vector is the query's,
// dense rank 1. Two stop-word twins of the query rank above the first in
// cosine (checked below), so its dense rank is at least 3 and reciprocal
// rank fusion puts the query's twin first: 1/62 + 1/61 > 1/61 + 1/63.
func TestFusedRanking(t *testing.T) {
	ctx := context.Background()
	l := open(t, bertFile(t))
	const query = "the dog of the house"
	texts := []string{"house dog house dog", query, "the cat of the mouse", "the cow of a mouse", "Bob drinks green tea"}
	vs, err := l.Embed(ctx, append([]string{query}, texts...))
	if err != nil {
		t.Fatal(err)
	}
	cos := func(i int) (s float64) {
		for j := range vs[0] {
			s += float64(vs[0][j]) * float64(vs[i+1][j])
		}
		return s
	}
	// preconditions of the construction (fixed weights: seed 1)
	if !(cos(2) > cos(0) && cos(3) > cos(0)) || cos(2) >= 0.9 || cos(3) >= 0.9 {
		t.Fatalf("cosines to the query %.4f %.4f %.4f %.4f %.4f: the twins must beat the first text and stay under the near-duplicate 0.9",
			cos(0), cos(1), cos(2), cos(3), cos(4))
	}

	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := textmem.Open(db, textmem.Options{Embedder: l})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := map[string]string{}
	for _, text := range texts {
		m, err := s.Add(ctx, "c", textmem.Memory{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		ids[m.ID] = text
	}
	if n, err := s.Vectors(ctx, "c"); n != len(texts) || err != nil {
		t.Fatalf("Vectors = %d, %v; want %d", n, err, len(texts))
	}
	order := func(q textmem.Query) []string {
		hits, err := s.SearchWith(ctx, "c", q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hits {
			out = append(out, ids[h.Memory.ID])
		}
		return out
	}
	lexical := textmem.DefaultQuery(query, 10)
	lexical.DenseWeight = 0
	if got, want := order(lexical), []string{"house dog house dog", query}; !slices.Equal(got, want) {
		t.Errorf("BM25 only: %q, want %q", got, want)
	}
	fused := order(textmem.DefaultQuery(query, 10))
	if len(fused) != len(texts) || fused[0] != query || fused[1] != "house dog house dog" {
		t.Errorf("fused: %q, want the query's twin, then the BM25 leader, then the rest", fused)
	}
}
