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

// A snapshot's prefix is a pack of the first n tokens alone: stored under
// them, it is the state a prefill of those n tokens saves, and a restore
// for a longer prompt starting with them brings back n tokens.
func TestSnapshotPrefix(t *testing.T) {
	ctx := context.Background()
	e := testenv.Engine(t, runtime.Options{})
	c, err := Open(testenv.DB(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	toks, err := e.Tokenize("Once upon a time, there was a little girl named Lily. She had a dog.", true)
	if err != nil {
		t.Fatal(err)
	}
	n := len(toks) / 2
	if err := e.Prefill(ctx, 0, toks[:n], 0); err != nil {
		t.Fatal(err)
	}
	want, err := e.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Prefill(ctx, 0, toks, n); err != nil {
		t.Fatal(err)
	}
	snap, err := c.Snapshot(e, 0, Header{Tokens: toks, Label: "shared:a", Scope: "shared:a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []int{0, len(toks) + 1} {
		if _, err := snap.Prefix(bad); err == nil {
			t.Errorf("Prefix(%d) of %d tokens: no error", bad, len(toks))
		}
	}
	pre, err := snap.Prefix(n)
	if err != nil {
		t.Fatal(err)
	}
	info, err := pre.Store(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NTokens != n || info.ID != PackID(ScopedKey(ConfigKey(e.KVConfig(), ""), "shared:a"), toks[:n]) {
		t.Fatalf("stored %+v, want %d tokens", info, n)
	}
	c.DropRAM()
	if _, got, _, err := c.State(info.ID); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the prefix's state differs from a prefill of the prefix (%v)", err)
	}
	rs, err := c.Restore(ctx, e, 1, toks, RestoreOptions{Scope: "shared:a"})
	if err != nil || rs.Tokens != n || rs.PackID != info.ID {
		t.Fatalf("restore: %+v, %v", rs, err)
	}
}
