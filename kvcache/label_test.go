package kvcache

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/runtime"
)

var testKV = runtime.KVConfig{ModelFingerprint: "m", NLayer: 2, KRowBytes: 8, VRowBytes: 8, TypeK: "f16", TypeV: "f16", NStream: 1, NCtx: 512}

// putPack stores a synthetic pack of toks labelled label; its state is
// derived from the tokens.
func putPack(t testing.TB, c *Cache, label string, toks []int32) Info {
	t.Helper()
	state := bytes.Repeat([]byte(fmt.Sprint(toks)), 50)
	info, err := c.Put(context.Background(), Header{KV: testKV, Tokens: toks, Label: label}, state)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func ids(infos []Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.ID
	}
	slices.Sort(out)
	return out
}

// checkWhole fails t unless every listed pack's blob decodes and no chunk
// is stored without a listed pack.
func checkWhole(t *testing.T, c *Cache, db *datadir.DB) {
	t.Helper()
	listed := map[string]bool{}
	for _, in := range c.List("") {
		listed[in.ID] = true
		blob, err := c.Blob(in.ID)
		if err == nil {
			_, _, err = Decode(blob)
		}
		if err != nil {
			t.Errorf("pack %.12s listed without a whole blob: %v", in.ID, err)
		}
	}
	err := db.Badger().View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyChunk)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if id := string(it.Item().Key()[len(keyChunk) : len(keyChunk)+64]); !listed[id] {
				t.Errorf("chunk of unlisted pack %.12s", id)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDeleteLabel: deleting one cube's packs leaves every other cube's
// packs listed, found by lookup and whole, also after a reopen.
func TestDeleteLabel(t *testing.T) {
	dir := t.TempDir()
	db := testenv.DB(t, dir)
	c, err := Open(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a1 := putPack(t, c, "a", []int32{1, 2, 3})
	a2 := putPack(t, c, "a", []int32{1, 2, 3, 4, 5})
	b1 := putPack(t, c, "b", []int32{7, 8, 9})
	ab := putPack(t, c, "ab", []int32{4, 4, 4}) // a label with "a" as prefix
	if got := ids(c.List("a")); !slices.Equal(got, ids([]Info{a1, a2})) {
		t.Fatalf("List(a) = %v", got)
	}
	n, err := c.DeleteLabel("a")
	if err != nil || n != 2 {
		t.Fatalf("DeleteLabel(a) = %d, %v", n, err)
	}
	if got := c.List("a"); len(got) != 0 {
		t.Fatalf("cube a still lists %v", got)
	}
	if got := ids(c.List("")); !slices.Equal(got, ids([]Info{b1, ab})) {
		t.Fatalf("left: %v", got)
	}
	cfg := ConfigKey(testKV, "")
	if m := c.Lookup(cfg, []int32{1, 2, 3, 4, 5, 6}); m.ID != "" {
		t.Fatalf("deleted pack still found: %+v", m)
	}
	if m := c.Lookup(cfg, []int32{7, 8, 9, 10}); m.ID != b1.ID || m.Tokens != 3 {
		t.Fatalf("lookup of b: %+v", m)
	}
	if n, err := c.DeleteLabel("nosuch"); n != 0 || err != nil {
		t.Fatalf("DeleteLabel(nosuch) = %d, %v", n, err)
	}
	checkWhole(t, c, db)
	c.Close()
	db.Close()
	db = testenv.DB(t, dir)
	c, err = Open(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(c.List("")); !slices.Equal(got, ids([]Info{b1, ab})) {
		t.Fatalf("after reopen: %v", got)
	}
	checkWhole(t, c, db)
}
