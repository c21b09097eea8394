package embed

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ollama/ollama/api"
)

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestHash(t *testing.T) {
	h, err := NewHash(64)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name() != "hash-v1:64" || h.Dim() != 64 {
		t.Errorf("name %q dim %d", h.Name(), h.Dim())
	}
	v, err := h.Embed(context.Background(), []string{"green tea", "Green  TEA!", "", "black coffee"})
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 4 || !slices.Equal(v[0], v[1]) {
		t.Fatalf("case and punctuation should not matter: %v", v[:2])
	}
	if n := norm(v[0]); math.Abs(n-1) > 1e-6 {
		t.Errorf("norm %v", n)
	}
	if n := norm(v[2]); math.Abs(n-1) > 1e-6 {
		t.Errorf("empty text norm %v, want 1 (the blank feature)", n)
	}
	if d := dot(v[0], v[3]); d >= dot(v[0], v[1]) {
		t.Errorf("unrelated text as close as itself: %v", d)
	}
	if _, err := NewHash(0); !errors.Is(err, ErrOptions) {
		t.Errorf("dim 0: %v", err)
	}
}

// ollamaServer answers /api/embed like Ollama: one dim-long vector per
// input, whose first element is the input's length.
func ollamaServer(t *testing.T, dim int, calls *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/embed" {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		var req api.EmbedRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var in []string
		switch x := req.Input.(type) {
		case string:
			in = []string{x}
		case []any:
			for _, s := range x {
				in = append(in, s.(string))
			}
		}
		resp := api.EmbedResponse{Model: req.Model}
		for _, s := range in {
			v := make([]float32, dim)
			v[0] = float32(len(s))
			resp.Embeddings = append(resp.Embeddings, v)
		}
		json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOllama(t *testing.T) {
	ctx := context.Background()
	var calls atomic.Int32
	srv := ollamaServer(t, 3, &calls)
	o, err := NewOllama(ctx, OllamaOptions{URL: srv.URL, Model: "nomic-embed-text", BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if o.Dim() != 3 || o.Name() != "ollama:nomic-embed-text" || calls.Load() != 1 {
		t.Errorf("dim %d name %q probe calls %d", o.Dim(), o.Name(), calls.Load())
	}
	v, err := o.Embed(ctx, []string{"a", "bb", "ccc", "dddd", "eeeee"})
	if err != nil {
		t.Fatal(err)
	}
	var firsts []float32
	for _, x := range v {
		firsts = append(firsts, x[0])
	}
	if !slices.Equal(firsts, []float32{1, 2, 3, 4, 5}) || calls.Load() != 4 {
		t.Errorf("firsts %v after %d calls, want 1..5 after 4", firsts, calls.Load())
	}
	if _, err := NewOllama(ctx, OllamaOptions{URL: srv.URL, Model: "m", Dim: 4}); err != nil {
		t.Fatal(err)
	}
	wrong, _ := NewOllama(ctx, OllamaOptions{URL: srv.URL, Model: "m", Dim: 4})
	if _, err := wrong.Embed(ctx, []string{"x"}); !errors.Is(err, ErrShape) {
		t.Errorf("dim mismatch: %v", err)
	}
	err = OllamaOptions{URL: "not a url", Dim: -1, BatchSize: -1}.Validate()
	want := "embed: bad options: Model is empty\nembed: bad options: URL \"not a url\" is not an absolute URL\nembed: bad options: Dim is -1, want >= 0\nembed: bad options: BatchSize is -1, want >= 0"
	if err == nil || err.Error() != want {
		t.Errorf("validate: %v", err)
	}
}

// Valid refuses vectors no similarity can use: NaN, ±Inf, all zeros.
func TestValid(t *testing.T) {
	for _, c := range []struct {
		v  []float32
		ok bool
	}{
		{[]float32{0.1, -0.2}, true},
		{[]float32{0, 0, 0}, false},
		{[]float32{}, false},
		{[]float32{1, float32(math.NaN())}, false},
		{[]float32{float32(math.Inf(1)), 0}, false},
		{[]float32{float32(math.Inf(-1))}, false},
	} {
		if err := Valid(c.v); (err == nil) != c.ok || !c.ok && !errors.Is(err, ErrBadVector) {
			t.Errorf("Valid(%v) = %v, want ok=%v", c.v, err, c.ok)
		}
	}
}

// Texts without a letter or digit still get a usable vector from Hash,
// and the same one each time.
func TestHashNoWords(t *testing.T) {
	h, err := NewHash(64)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"\u1800", "🐈", "?!", "", "   ", "🐈🐈"}
	vs, err := h.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if err := Valid(v); err != nil || len(v) != 64 {
			t.Errorf("%q: %v", texts[i], err)
		}
	}
	again, _ := h.Embed(context.Background(), texts[:1])
	if !slices.Equal(again[0], vs[0]) {
		t.Fatalf("not deterministic: %v %v", again[0], vs[0])
	}
}

// Features of opposite signs that share a bucket can cancel out (a fuzz
// finding): "!" and "\u02de" hash to one of 64 buckets with opposite
// signs, as do 4,966 of the 24.7 million two-symbol texts below U+3000;
// they still get a usable vector, and the same one each time.
func TestHashCancelledFeatures(t *testing.T) {
	h, err := NewHash(64)
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"!\u02de", "!\u031f", "!\u034c"}
	vs, err := h.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vs {
		if err := Valid(v); err != nil {
			t.Fatalf("%q: %v", texts[i], err)
		}
	}
	if !slices.Equal(vs[0], vs[1]) {
		t.Fatalf("cancelled texts get one fixed vector: %v, %v", vs[0], vs[1])
	}
}
