package kvcache

import (
	"bytes"
	"context"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/runtime"
)

// A snapshot holds the state of the moment it was taken: the sequence is
// cleared (free for another request) before the pack is stored, and the
// stored pack is that state byte for byte, under the live KV config.
func TestSnapshotOutlivesTheSequence(t *testing.T) {
	ctx := context.Background()
	e := testenv.Engine(t, runtime.Options{})
	c, err := Open(testenv.DB(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks, err := e.Tokenize("Once upon a time, there was a little girl named Lily.", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Prefill(ctx, 0, toks, 0); err != nil {
		t.Fatal(err)
	}
	want, err := e.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(e, 0, Header{Tokens: toks, Label: "c", Scope: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ClearSeq(0); err != nil {
		t.Fatal(err)
	}
	info, err := snap.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NTokens != len(toks) || info.ID != PackID(ScopedKey(ConfigKey(e.KVConfig(), ""), "c"), toks) {
		t.Fatalf("stored %+v, want %d tokens under the live config", info, len(toks))
	}
	c.DropRAM()
	if _, got, _, err := c.State(info.ID); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("stored state differs from the sequence's at the snapshot (%v)", err)
	}
}
