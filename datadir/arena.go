package datadir

import (
	"regexp"
	"strconv"

	"github.com/dgraph-io/ristretto/v2/z"
)

// arenaSize matches one tag of z.Allocators' report: "Tag: Builder Num: 5
// Size: 80 MiB . " (the size as go-humanize's IBytes writes it: three
// significant digits, one decimal under 10).
var arenaSize = regexp.MustCompile(`Num: \d+ Size: ([0-9.]+) (B|KiB|MiB|GiB|TiB)`)

var arenaUnits = map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

// ArenaBytes is the heap held by Badger's arenas, bytes, over every Badger
// in the process: the z.Allocator arenas its table builders write tables
// in (twice the table's size each, grown to fit; built by memtable
// flushes and compactions, up to eight pooled between builds: badger's
// db.go and table/builder.go), and any other z.Allocator. It reads
// ristretto's registry of live allocators (z.Allocators), whose report
// rounds each tag's total to three significant digits, so the figure is
// within 0.5% (or 0.05 of a unit under 10 of it). The heap they hold grows
// with the tree: a compaction of more tables builds more at once.
func ArenaBytes() int64 {
	var n float64
	for _, m := range arenaSize.FindAllStringSubmatch(z.Allocators(), -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		n += v * arenaUnits[m[2]]
	}
	return int64(n)
}

// ArenaBytes is the package's ArenaBytes: the heap of every Badger's
// arenas in the process, d's among them (ristretto's registry is one per
// process).
func (d *DB) ArenaBytes() int64 { return ArenaBytes() }
