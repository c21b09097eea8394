package embed

import (
	"context"
	"fmt"
	"math"
)

// An Embedder maps texts to dense vectors.
//
// Embed returns exactly one vector per text, in input order, each of length
// Dim(): a [len(texts)][Dim()]float32. Vectors need not be normalised;
// callers that compare by cosine normalise them. An empty texts gives an
// empty result and no error. On error no vector is returned. Embed must be
// safe for concurrent use and must honour ctx cancellation.
//
// Dim is constant for the life of the Embedder. Name identifies the model
// and its configuration (for example "ollama:nomic-embed-text"); vectors
// stored under one Name are never compared with vectors of another.
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Dim() int
	Name() string
}

// Normalize scales v in place to unit L2 norm and returns it; a zero vector
// is left as is.
func Normalize(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// check verifies an Embedder's output: shape and values (Valid).
func check(name string, n, dim int, vecs [][]float32) error {
	if len(vecs) != n {
		return fmt.Errorf("%w: %s returned %d vectors for %d texts", ErrShape, name, len(vecs), n)
	}
	for i, v := range vecs {
		if len(v) != dim {
			return fmt.Errorf("%w: %s vector %d has %d dims, want %d", ErrShape, name, i, len(v), dim)
		}
		if err := Valid(v); err != nil {
			return fmt.Errorf("%s vector %d: %w", name, i, err)
		}
	}
	return nil
}

// Valid reports ErrBadVector for a vector no similarity can be computed
// with: one holding NaN or ±Inf, or all zeros (its cosine is undefined).
// Whatever the embedder (a model, an upstream server), such a vector is an
// error, never stored.
func Valid(v []float32) error {
	nonzero := false
	for i, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%w: element %d is %v", ErrBadVector, i, x)
		}
		if x != 0 {
			nonzero = true
		}
	}
	if !nonzero {
		return fmt.Errorf("%w: all %d elements are zero", ErrBadVector, len(v))
	}
	return nil
}
