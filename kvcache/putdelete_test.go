package kvcache

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
)

// TestConcurrentPutDelete: a Put and a Delete of the same pack racing
// each other leave either the whole pack or nothing: never a pack listed
// without its blob, nor chunks without a pack, in the running cache and
// after a reopen.
func TestConcurrentPutDelete(t *testing.T) {
	dir := t.TempDir()
	db := testenv.DB(t, dir)
	c, err := Open(db, Options{RAMBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 2, 3}
	id := PackID(ConfigKey(testKV, ""), toks)
	for round := range 300 {
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := c.Put(context.Background(), Header{KV: testKV, Tokens: toks, Label: "x"}, bytes.Repeat([]byte{byte(round)}, 3000)); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if err := c.Delete(id); err != nil && !errors.Is(err, ErrNotFound) {
				t.Error(err)
			}
		})
		wg.Wait()
		checkWhole(t, c, db)
		if t.Failed() {
			t.Fatalf("round %d", round)
		}
	}
	c.Close()
	db.Close()
	db = testenv.DB(t, dir)
	if c, err = Open(db, Options{}); err != nil {
		t.Fatal(err)
	}
	checkWhole(t, c, db)
}
