package kvcache

import "sync"

// maxStateBufs is how many state buffers a Cache keeps for reuse: the
// state a restore decodes into and, for a lossy pack, the quantized
// stream it is dequantized from.
const maxStateBufs = 2

// stateBufs keeps the buffers that restores from Badger decoded into, for
// the next such restore. A buffer that has been written once is backed by
// resident pages; a fresh one of the same size costs its page faults on
// the first write, which on a VM are the larger part of reading a pack
// back from the page cache (100–240 ms for a fresh 128 MiB buffer under
// load, against 7–19 ms to copy into one already faulted in, on the 2-core
// VM of docs/benchmarks.md). At most maxStateBufs buffers, together at
// most limit bytes, are kept. Safe for concurrent use; mu is a leaf lock.
type stateBufs struct {
	limit int64 // bytes kept at most (Options.RAMBytes)

	// mu guards bufs and held.
	mu   sync.Mutex
	bufs [][]byte
	held int64 // sum of cap(bufs[i])
}

// take returns a buffer of n bytes (contents undefined): the smallest
// kept buffer that holds n bytes, else a new one.
func (s *stateBufs) take(n int) []byte {
	s.mu.Lock()
	best := -1
	for i, b := range s.bufs {
		if cap(b) >= n && (best < 0 || cap(b) < cap(s.bufs[best])) {
			best = i
		}
	}
	if best >= 0 {
		b := s.bufs[best]
		s.bufs = append(s.bufs[:best], s.bufs[best+1:]...)
		s.held -= int64(cap(b))
		s.mu.Unlock()
		return b[:n]
	}
	s.mu.Unlock()
	return make([]byte, n)
}

// give keeps b for a later take, in place of the smallest kept buffers
// when more than maxStateBufs or limit bytes would be kept; a buffer
// larger than limit is dropped. The caller must not use b afterwards.
func (s *stateBufs) give(b []byte) {
	if b == nil || int64(cap(b)) > s.limit {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bufs = append(s.bufs, b[:0])
	s.held += int64(cap(b))
	for len(s.bufs) > maxStateBufs || s.held > s.limit {
		small := 0
		for i, k := range s.bufs {
			if cap(k) < cap(s.bufs[small]) {
				small = i
			}
		}
		s.held -= int64(cap(s.bufs[small]))
		s.bufs = append(s.bufs[:small], s.bufs[small+1:]...)
	}
}

// drop forgets every kept buffer (Close).
func (s *stateBufs) drop() {
	s.mu.Lock()
	s.bufs, s.held = nil, 0
	s.mu.Unlock()
}
