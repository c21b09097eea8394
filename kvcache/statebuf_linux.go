package kvcache

import "syscall"

// newState returns a zeroed buffer of n bytes for a decoded state. From
// hugeMin up it asks the kernel for transparent huge pages on it
// (madvise(MADV_HUGEPAGE); the default THP mode "madvise" gives them only
// to ranges that ask): the first write into a fresh state then takes one
// page fault per 2 MiB instead of one per 4 KiB. On this project's 2-core
// VM those faults were most of the cost of unshuffling a 500 MiB state
// read back from Badger. A refused madvise (THP off, an older kernel)
// leaves ordinary pages: the state is the same either way.
func newState(n int) []byte {
	b := make([]byte, n)
	if n >= hugeMin {
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	}
	return b
}
