package textmem

import (
	"context"
	"errors"
	"fmt"

	bg "github.com/dgraph-io/badger/v4"
)

// DefaultK is the number of hits Search returns when k <= 0.
const DefaultK = 10

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
