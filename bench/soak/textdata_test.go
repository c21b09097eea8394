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
	bytes    int64 // keys and values under "t/"
	memories int   // memory records among them
}

// perMemory is the text tier's bytes per memory record, 0 without any.
func (x textTier) perMemory() float64 {
	if x.memories == 0 {
		return 0
	}
	return float64(x.bytes) / float64(x.memories)
}

// textTierBytes opens the data directory db read-only (no server may have
// it open) and returns the bytes of the keys and values stored under the
// text tier's prefix "t/" (memories, their versions, index postings,
// vectors, and the conversation records of package convmem), and how many
// memory records ("t/<cube>/m/<id>") are among them.
func textTierBytes(t *testing.T, db string) textTier {
	t.Helper()
	d, err := datadir.Open(datadir.Options{Dir: db, ReadOnly: true})
	if err != nil {
		t.Errorf("text tier bytes: %v", err)
		return textTier{}
	}
	defer d.Close()
	var n int64
	mems := 0
	err = d.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte("t/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			n += int64(len(k)) + it.Item().ValueSize()
			// t/<cube>/m/<id>: the cube's name has no '/'
			if i := bytes.IndexByte(k[2:], '/'); i >= 0 && bytes.HasPrefix(k[2+i+1:], []byte("m/")) {
				mems++
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("text tier bytes: %v", err)
	}
	return textTier{bytes: n, memories: mems}
}
