package datadir

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"
)

// flushHeld fills 90% of the memtable with 30 KiB values (under the value
// threshold: in the LSM tree, larger than a 4 KiB block), flushes it to a table (which Open's options compact at once), and
// returns the live heap gained since Open, bytes, after a GC: what the
// table builders of the flush and its compaction left pooled, with the
// memtable size in effect.
func flushHeld(t *testing.T, opts Options) (held, memSize int64) {
	t.Helper()
	opts.Dir, opts.NoSync, opts.NoCompactOnOpen = t.TempDir(), true, true
	d, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := int64(ms.HeapAlloc)
	val := make([]byte, 30<<10)
	for i := 0; int64(i*len(val)) < d.memSize*9/10; i++ {
		rand.Read(val) // incompressible, as zstd-compressed packs are
		if err := d.Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "p/%06d", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.flushMemtable(); err != nil {
		t.Fatal(err)
	}
	if err := d.waitL0(); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc) - before, d.memSize
}

// The heap a memtable flush leaves held is bounded by the default
// memtable size: 8 MiB of 30 KiB values leaves under 56 MiB (32.1 MiB
// measured: the flush's table-builder arena, twice the table).
func TestFlushHeap(t *testing.T) {
	held, mem := flushHeld(t, Options{})
	t.Logf("memtable %d MiB: %.1f MiB of heap held after its flush", mem>>20, float64(held)/(1<<20))
	if mem > defaultMemTableSize {
		t.Fatalf("memtable %d bytes, want at most %d", mem, defaultMemTableSize)
	}
	if held > 56<<20 {
		t.Errorf("a flush of a %d MiB memtable of 30 KiB values left %.1f MiB of heap held, want under 56 MiB", mem>>20, float64(held)/(1<<20))
	}
}

// The heap Badger's table builders keep pooled stays bounded as the LSM
// tree deepens: 160 MiB of 30 KiB values overwriting 2,700 keys (80 MiB
// live, under the value threshold: in the LSM tree) go through 20 flushes
// and compactions down to the sixth level; the live heap, sampled every
// 600 writes once the compactions have ended, stays under Badger's eight pooled
// arenas of twice the memtable (128 MiB; 67 to 83 MiB measured). With
// Badger's table defaults (4 KiB blocks, Snappy, tables doubling per
// level) it was 448 to 458 MiB.
func TestCompactionHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 160 MiB")
	}
	d, err := Open(Options{Dir: t.TempDir(), NoSync: true, NoCompactOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := int64(ms.HeapAlloc)
	// settled is the live heap once compactions below level 0 have ended
	// (their builders' arenas back in the pool): two readings after a GC,
	// 200 ms apart, within 1 MiB, or the last of 25
	settled := func() int64 {
		var last int64
		for range 25 {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			h := int64(ms.HeapAlloc)
			if last != 0 && h-last < 1<<20 && last-h < 1<<20 {
				return h
			}
			last = h
			time.Sleep(200 * time.Millisecond)
		}
		return last
	}
	val := make([]byte, 30<<10)
	var peak int64
	for i := 0; i < 5400; i++ {
		rand.Read(val)
		if err := d.Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "p/%06d", i%2700), val) }); err != nil {
			t.Fatal(err)
		}
		if i%600 == 599 {
			if err := d.waitL0(); err != nil {
				t.Fatal(err)
			}
			peak = max(peak, settled()-before)
		}
	}
	if err := d.flushMemtable(); err != nil {
		t.Fatal(err)
	}
	if err := d.waitL0(); err != nil {
		t.Fatal(err)
	}
	held := settled() - before
	var levels []string
	for _, l := range d.db.Levels() {
		if l.NumTables > 0 {
			levels = append(levels, fmt.Sprintf("L%d %d tables %.1f MiB", l.Level, l.NumTables, float64(l.Size)/(1<<20)))
		}
	}
	t.Logf("tree %v; heap held %.1f MiB at the end, at most %.1f MiB at the samples; Badger's arenas %.1f MiB at the end", levels, float64(held)/(1<<20), float64(peak)/(1<<20), float64(ArenaBytes())/(1<<20))
	// Badger pools eight arenas, each twice the table (the memtable's size)
	if m, bound := max(held, peak), 8*2*d.memSize; m > bound {
		t.Errorf("Badger held %.1f MiB of heap, want under %d MiB", float64(m)/(1<<20), bound>>20)
	}
}
