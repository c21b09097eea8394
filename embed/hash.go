package embed

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
)

// Hash is a deterministic feature-hashing embedder: each lower-cased word
// and each character trigram of each word (with boundary marks) is hashed
// (FNV-1a, 64 bit) to one of Dim buckets with a sign taken from another bit
// of the hash (Weinberger et al., "Feature Hashing for Large Scale Multitask
// Learning", ICML 2009). Words weigh 1, trigrams 0.5. The vector is
// L2-normalised. A text with no letter or digit hashes its other
// characters instead (a blank text: one fixed feature), and a text whose
// features cancel out gets one fixed feature, so no vector is all zeros. It needs no model; texts sharing words or word pieces get a
// positive cosine. Safe for concurrent use.
type Hash struct {
	dim int
}

// NewHash returns a Hash embedder with dim buckets (dim > 0).
func NewHash(dim int) (*Hash, error) {
	if dim <= 0 {
		return nil, fmt.Errorf("%w: Hash dim is %d, want > 0", ErrOptions, dim)
	}
	return &Hash{dim: dim}, nil
}

// Name implements Embedder: "hash-v1:<dim>".
func (h *Hash) Name() string { return fmt.Sprintf("hash-v1:%d", h.dim) }

// Dim implements Embedder.
func (h *Hash) Dim() int { return h.dim }

// Embed implements Embedder.
func (h *Hash) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = h.one(t)
	}
	return out, nil
}

func (h *Hash) one(text string) []float32 {
	v := make([]float32, h.dim)
	add := func(feature string, w float32) {
		f := fnv.New64a()
		f.Write([]byte(feature))
		x := f.Sum64()
		if x>>63 == 1 {
			w = -w
		}
		v[(x&(1<<62-1))%uint64(h.dim)] += w
	}
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	for _, w := range words {
		add("w:"+w, 1)
		r := []rune("^" + w + "$")
		for i := 0; i+3 <= len(r); i++ {
			add("g:"+string(r[i:i+3]), 0.5)
		}
	}
	if len(words) == 0 {
		// no letter or digit (emoji, punctuation, blanks): each other
		// character is a feature, and a blank text one fixed feature, so
		// the vector is never all zeros (Valid refuses those)
		for _, r := range text {
			if !unicode.IsSpace(r) {
				add("r:"+string(r), 1)
			}
		}
		if strings.TrimSpace(text) == "" {
			add("blank", 1)
		}
	}
	// features of opposite signs can cancel to zero in every bucket
	// ("!?" when both hash to one bucket with opposite signs: a fuzz
	// finding); such a text gets one fixed feature instead
	zero := true
	for _, x := range v {
		if x != 0 {
			zero = false
			break
		}
	}
	if zero {
		add("cancelled", 1)
	}
	return Normalize(v)
}
