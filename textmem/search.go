package textmem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// DefaultK is the number of hits Search returns when k <= 0.
const DefaultK = 10

// hits loads the memories of ids, pairing them with the scores of top.
// Memories deleted since scoring are skipped.
func (s *Store) hits(ctx context.Context, cube string, ids []string, top []scored) ([]Hit, error) {
	out := make([]Hit, 0, len(ids))
	err := s.be.View(ctx, cube, func(txn Txn) error {
		if mg, ok := txn.(interface {
			GetMany([][]byte) ([][]byte, error)
		}); ok {
			keys := make([][]byte, len(ids))
			for i, id := range ids {
				keys[i] = nsKey(nsMem, id)
			}
			vals, err := mg.GetMany(keys)
			if err != nil {
				return err
			}
			for i, v := range vals {
				if v == nil {
					continue // deleted since scoring
				}
				var m Memory
				if err := json.Unmarshal(v, &m); err != nil {
					return fmt.Errorf("memory %s: %w", ids[i], err)
				}
				out = append(out, Hit{Memory: m, Score: top[i].score})
			}
			return nil
		}
		for i, id := range ids {
			if err := ctx.Err(); err != nil {
				return err
			}
			m, err := getMemory(txn, cube, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if errors.Is(err, ErrDamaged) {
				s.noteDamage(cube, err) // left out of the hits
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
