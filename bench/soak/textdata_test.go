package soak

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	bg "github.com/dgraph-io/badger/v4"
	"github.com/memosrt/memosrt/datadir"
)

// The soaks' clients store memories that nobody deletes (a recorded chat
// turn becomes a memory of kind "turn", and the mix adds memories), so a
// data directory under them grows by the memories' bytes however well
// Badger's space is reclaimed. The soaks count the memories as they go
// (memoryCount) and weigh them at the end (textTierBytes), and judge the
// disk beyond them: "live memories plus the budgets plus a slack"
// (docs/data-directory.md).

// memoryCount is the number of memories in every cube of the server at
// base (the "memories" of each cube GET /v1/cubes lists), or -1 when the
// server did not answer.
func memoryCount(base string) int {
	resp, err := http.Get(base + "/v1/cubes")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var out struct {
		Cubes []struct {
			Memories int `json:"memories"`
		} `json:"cubes"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		return -1
	}
	n := 0
	for _, c := range out.Cubes {
		n += c.Memories
	}
	return n
}

// textTier is what textTierBytes found in a data directory.
type textTier struct {
	logical  int64 // keys and values of the memories' records (memKeyPrefixes), newest versions, bytes
	keys     int64 // how many such keys
	memories int   // memory records among them
	// entryCost is the tables' bytes per entry beyond its key and the
	// value it holds (a value-log pointer for a value in the value log):
	// Badger's per-entry header and offset, the key's version, the value's
	// meta bytes, the bloom filter and the block index, less what the
	// prefix-compressed keys save (7 bytes in a 30-minute soak's
	// directory). Measured over every table (tableOverhead).
	entryCost float64
	// bytes is the memories' bytes on disk: logical + keys × entryCost
	bytes int64
}

// perMemory is the memories' bytes on disk per memory record, 0 without
// any.
func (x textTier) perMemory() float64 {
	if x.memories == 0 {
		return 0
	}
	return float64(x.bytes) / float64(x.memories)
}

// memKeyPrefixes are the key prefixes of what grows with the memories: the
// text tier ("t/": memories, their versions, index postings, vectors, and
// the conversation records of package convmem) and the scheduler's usage
// (heat) record of each memory used ("s/u/", package scheduler).
var memKeyPrefixes = []string{"t/", "s/u/"}

// textTierBytes opens the data directory db read-only (no server may have
// it open) and weighs the memories in it: the keys and values stored under
// memKeyPrefixes, each with the tables' cost per entry (tableOverhead), and
// how many memory records ("t/<cube>/m/<id>") are among them. The text
// tier's keys and values alone undercount the disk a memory takes: in a
// 30-minute soak's directory they came to 2,152 bytes a memory, and with
// the usage records and the tables' 7 bytes for each of its 17 entries to
// 2,331, 8% more, which the disk beyond the memories counted as growth
// (docs/benchmarks.md).
func textTierBytes(t *testing.T, db string) textTier {
	t.Helper()
	d, err := datadir.Open(datadir.Options{Dir: db, ReadOnly: true})
	if err != nil {
		t.Errorf("text tier bytes: %v", err)
		return textTier{}
	}
	defer d.Close()
	var x textTier
	err = d.View(func(txn *bg.Txn) error {
		for _, p := range memKeyPrefixes {
			it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(p)})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()
				// the value wherever it is (a memory of 32 KiB or more is
				// in the value log; the 12-byte pointer its table entry
				// then holds is left out)
				x.logical += int64(len(k)) + it.Item().ValueSize()
				x.keys++
				// t/<cube>/m/<id>: the cube's name has no '/'
				if p == "t/" {
					if i := bytes.IndexByte(k[2:], '/'); i >= 0 && bytes.HasPrefix(k[2+i+1:], []byte("m/")) {
						x.memories++
					}
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		t.Errorf("text tier bytes: %v", err)
	}
	x.entryCost = tableOverhead(t, d, db)
	x.bytes = x.logical + int64(float64(x.keys)*x.entryCost)
	return x
}

// vptrBytes is the size of a value-log pointer in a table entry (Badger's
// valuePointer: Fid, Len, Offset, three uint32s; structs.go).
const vptrBytes = 12

// storedValue is the bytes the tables hold for its value: the value
// under the value threshold, a value-log pointer at or above it.
func storedValue(it *bg.Item, threshold int64) int64 {
	if n := it.ValueSize(); n < threshold {
		return n
	}
	return vptrBytes
}

// tableOverhead is the tables' bytes per entry beyond the keys and the
// values they hold: the *.sst files' allocated bytes in dir (dirUsage, as
// the soak's samples count them) less the keys and stored values
// (storedValue) of every version of every key of d, over their count. The
// iterator also reads a memtable Badger replays: none after serve's
// graceful stop, which flushes it. (Badger's TableInfo OnDiskSize summed
// to twice the files' size in a soak's directory, so the files are read.)
func tableOverhead(t *testing.T, d *datadir.DB, dir string) float64 {
	t.Helper()
	_, kinds := dirUsage(dir)
	disk := kinds.bytes["sst"]
	var held, entries int64
	err := d.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{AllVersions: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			held += int64(len(it.Item().Key())) + storedValue(it.Item(), d.ValueThreshold())
			entries++
		}
		return nil
	})
	if err != nil || entries == 0 {
		t.Errorf("table overhead: %v (%d entries)", err, entries)
		return 0
	}
	return float64(disk-held) / float64(entries)
}
