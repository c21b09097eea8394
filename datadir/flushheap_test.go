package datadir

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
)

// flushHeld fills 90% of the memtable with 100 KiB values (under the value
// threshold: in the LSM tree, as the 64 to 128 KiB packs of a small model
// are), flushes it to a table (which Open's options compact at once), and
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
	val := make([]byte, 100<<10)
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
// memtable size: 4 MiB full of 100 KiB values leaves under 56 MiB (40 MiB
// measured: 28 MiB of the flush's table builder, 12 MiB of its
// compaction's; a 16 MiB memtable left 176 to 180 MiB, over the 128 MiB
// heap base of docs/data-directory.md).
func TestFlushHeap(t *testing.T) {
	held, mem := flushHeld(t, Options{})
	t.Logf("memtable %d MiB: %.1f MiB of heap held after its flush", mem>>20, float64(held)/(1<<20))
	if mem > defaultMemTableSize {
		t.Fatalf("memtable %d bytes, want at most %d", mem, defaultMemTableSize)
	}
	if held > 56<<20 {
		t.Errorf("a flush of a %d MiB memtable of 100 KiB values left %.1f MiB of heap held, want under 56 MiB", mem>>20, float64(held)/(1<<20))
	}
}

// The heap Badger's table builders keep pooled stays bounded as the LSM
// tree deepens: 160 MiB of 100 KiB values overwriting 800 keys (80 MiB
// live, under the value threshold: in the LSM tree) go through 40 flushes
// and compactions to the second level and beyond; the live heap, sampled
// every 200 writes once level 0 is compacted, stays under 64 MiB (40 to 52 MiB
// measured). With Badger's table defaults (4 KiB blocks, Snappy, tables
// doubling per level) it was 196 to 220 MiB.
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
	val := make([]byte, 100<<10)
	var peak int64
	for i := 0; i < 1600; i++ {
		rand.Read(val)
		if err := d.Update(func(tx *bg.Txn) error { return tx.Set(fmt.Appendf(nil, "p/%06d", i%800), val) }); err != nil {
			t.Fatal(err)
		}
		if i%200 == 199 {
			if err := d.waitL0(); err != nil {
				t.Fatal(err)
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			peak = max(peak, int64(ms.HeapAlloc)-before)
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
	held := int64(ms.HeapAlloc) - before
	var levels []string
	for _, l := range d.db.Levels() {
		if l.NumTables > 0 {
			levels = append(levels, fmt.Sprintf("L%d %d tables %.1f MiB", l.Level, l.NumTables, float64(l.Size)/(1<<20)))
		}
	}
	t.Logf("tree %v; heap held %.1f MiB at the end, at most %.1f MiB at the samples", levels, float64(held)/(1<<20), float64(peak)/(1<<20))
	if m := max(held, peak); m > 64<<20 {
		t.Errorf("Badger held %.1f MiB of heap, want under 64 MiB", float64(m)/(1<<20))
	}
}
