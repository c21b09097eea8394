package textmem

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	bg "github.com/dgraph-io/badger/v4"
)

// DefaultK is the number of hits Search returns when k <= 0.
const DefaultK = 10

// Search returns up to k memories of cube that best match query by BM25,
// best first; k <= 0 means DefaultK. A query with no index terms (empty,
// or only stop words) gives no hits and no error. Scores are BM25 scores
// (see the bm25 formula in index.go) with each distinct query term weighted
// 1.
func (s *Store) Search(ctx context.Context, cube, query string, k int) ([]Hit, error) {
	if !utf8.ValidString(query) {
		return nil, ErrInvalidUTF8
	}
	if k <= 0 {
		k = DefaultK
	}
	ix, err := s.index(ctx, cube)
	if err != nil {
		return nil, err
	}
	q := make(map[string]float64)
	s.opts.Analyzer.Terms(query, func(t string) { q[t] = 1 })
	ix.mu.RLock()
	top := ix.topK(ix.bm25(q, s.opts.K1, s.opts.B, nil), k)
	ids := make([]string, len(top))
	for i, c := range top {
		ids[i] = ix.docs[c.doc].id
	}
	ix.mu.RUnlock()
	return s.hits(ctx, cube, ids, top)
}

// hits loads the memories of ids, pairing them with the scores of top.
// Memories deleted since scoring are skipped.
func (s *Store) hits(ctx context.Context, cube string, ids []string, top []scored) ([]Hit, error) {
	out := make([]Hit, 0, len(ids))
	err := s.db.View(func(txn *bg.Txn) error {
		for i, id := range ids {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := getMemory(txn, cube, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			out = append(out, Hit{Memory: m, Score: top[i].score})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("textmem: search cube %s: %w", cube, err)
	}
	return out, nil
}
