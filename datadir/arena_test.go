package datadir

import (
	"testing"

	"github.com/dgraph-io/ristretto/v2/z"
)

// ArenaBytes sums the allocators ristretto has registered: one of 16 MiB,
// then one asked for 3 MiB + 5 bytes (its first buffer the next power of
// two, 4 MiB: "4.0 MiB" in the report), and back to where it was once
// both are released. A Badger another test left open may free a pooled
// arena meanwhile (one each idle 2 s): a reading that moved is tried
// again, up to three times.
func TestArenaBytes(t *testing.T) {
	var errs []string
	for range 3 {
		errs = errs[:0]
		base := ArenaBytes()
		a := z.NewAllocator(16<<20, "arena-test-a")
		if got := ArenaBytes() - base; got != 16<<20 {
			errs = append(errs, "with a 16 MiB arena: "+mib(got)+" more, want 16 MiB")
		}
		b := z.NewAllocator(3<<20+5, "arena-test-b")
		if got := ArenaBytes() - base; got != 20<<20 {
			errs = append(errs, "with 16 + 4 MiB of arenas: "+mib(got)+" more, want 20 MiB")
		}
		a.Release()
		b.Release()
		if got := ArenaBytes() - base; got != 0 {
			errs = append(errs, "after release: "+mib(got)+" more, want 0")
		}
		if len(errs) == 0 {
			return
		}
	}
	for _, e := range errs {
		t.Error(e)
	}
}
