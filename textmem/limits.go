package textmem

import "fmt"

// badgerMaxKey is Badger's largest key, bytes (maxKeySize in
// github.com/dgraph-io/badger/v4 txn.go).
const badgerMaxKey = 65000

// checkTermKeys returns ErrTooLarge when a posting key of one of text's
// index terms in cube would exceed the Backend's key limit (Backend.MaxKey:
// a single word of about 64 KiB on Badger, 2 KiB on PostgreSQL), which the
// Backend would refuse in the middle of the write.
func (s *Store) checkTermKeys(cube, text string) error {
	longest := 0
	s.opts.Analyzer.Terms(text, func(term string) { longest = max(longest, len(term)) })
	// postKey(cube, term, id) with a 24-byte id
	limit := s.be.MaxKey(cube)
	if n := len(nsPrefix(nsPost)) + longest + 1 + 24; n > limit {
		return fmt.Errorf("%w: a word of %d bytes; the index takes words up to %d bytes", ErrTooLarge, longest, limit-(n-longest))
	}
	return nil
}
