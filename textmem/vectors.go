package textmem

import (
	bg "github.com/dgraph-io/badger/v4"
)

// loadVectors reads the stored vectors of cube into ix; the caller holds
// ix.mu.
func (s *Store) loadVectors(txn *bg.Txn, cube string, ix *cubeIndex) error {
	return nil
}
