package datadir

import (
	"testing"

	"github.com/dgraph-io/ristretto/v2/z"
)

// ArenaBytes sums the allocators ristretto has registered: one of 16 MiB,
// then one asked for 3 MiB + 5 bytes (its first buffer the next power of
// two, 4 MiB: "4.0 MiB" in the report), and back to where it was once
// both are released.
func TestArenaBytes(t *testing.T) {
	base := ArenaBytes()
	a := z.NewAllocator(16<<20, "arena-test-a")
	if got := ArenaBytes() - base; got != 16<<20 {
		t.Errorf("with a 16 MiB arena: %d bytes more, want %d", got, 16<<20)
	}
	b := z.NewAllocator(3<<20+5, "arena-test-b")
	if got := ArenaBytes() - base; got != 20<<20 {
		t.Errorf("with 16 + 4 MiB of arenas: %d bytes more, want %d", got, 20<<20)
	}
	a.Release()
	b.Release()
	if got := ArenaBytes(); got != base {
		t.Errorf("after release: %d bytes, want %d", got, base)
	}
}
