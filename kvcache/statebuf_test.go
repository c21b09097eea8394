package kvcache

import (
	"bytes"
	"context"
	"testing"
)

func TestStateBufs(t *testing.T) {
	s := stateBufs{limit: 100}
	a := s.take(40)
	if len(a) != 40 || cap(a) != 40 {
		t.Fatalf("take(40) on an empty pool: len %d cap %d", len(a), cap(a))
	}
	s.give(a)
	b := s.take(30) // the kept 40-byte buffer, not a new one
	if len(b) != 30 || &b[:1][0] != &a[:1][0] {
		t.Fatalf("take(30) after giving 40 bytes: len %d, same buffer %v", len(b), &b[:1][0] == &a[:1][0])
	}
	if s.held != 0 || len(s.bufs) != 0 {
		t.Fatalf("after take: held %d, %d kept", s.held, len(s.bufs))
	}
	s.give(b)
	if c := s.take(41); cap(c) != 41 || len(s.bufs) != 1 {
		t.Fatalf("take(41) with a 40-byte buffer kept: cap %d, %d kept", cap(c), len(s.bufs))
	}
	// at most maxStateBufs buffers and limit bytes: the smallest go first
	s.give(make([]byte, 50)) // 40 + 50
	s.give(make([]byte, 30)) // 40 + 50 + 30: the 30 goes (count), then 90 bytes
	if s.held != 90 || len(s.bufs) != 2 {
		t.Fatalf("kept %d buffers, %d bytes; want 2, 90", len(s.bufs), s.held)
	}
	s.give(make([]byte, 60)) // 40 + 50 + 60: 40 goes (count), 110 > 100: 50 goes
	if s.held != 60 || len(s.bufs) != 1 {
		t.Fatalf("kept %d buffers, %d bytes; want 1, 60", len(s.bufs), s.held)
	}
	s.give(make([]byte, 101)) // over limit: dropped
	s.give(nil)
	if s.held != 60 || len(s.bufs) != 1 {
		t.Fatalf("after an oversized give: kept %d buffers, %d bytes", len(s.bufs), s.held)
	}
	s.drop()
	if s.held != 0 || len(s.bufs) != 0 {
		t.Fatalf("after drop: kept %d buffers, %d bytes", len(s.bufs), s.held)
	}
}

// Restores from Badger decode into the same kept buffers, one pack after
// another of another size: each restored state is the stored one byte for
// byte and greedy output after it is the cold one.
func TestRestoreFromBadgerReusesBuffers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	long, _ := f.eng.Tokenize("Bob rides a yellow bike to school every day, and his sister Sue walks beside him with her red umbrella in the rain.", true)
	longPrompt := append(append([]int32{}, long...), f.prompt[len(f.pack):]...)
	if _, err := f.cache.Warm(ctx, f.eng, 0, long, WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	want := map[int][]byte{}
	for _, p := range []struct {
		prompt []int32
		n      int
	}{{f.prompt, len(f.pack)}, {longPrompt, len(long)}} {
		r, err := f.cache.Restore(ctx, f.eng, 0, p.prompt, RestoreOptions{})
		if err != nil || r.Refused != nil || r.Tokens != p.n {
			t.Fatalf("restore of %d tokens: %+v, %v", p.n, r, err)
		}
		if want[p.n], err = f.eng.SaveSeq(0); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range []struct {
		prompt []int32
		n      int
	}{{f.prompt, len(f.pack)}, {longPrompt, len(long)}, {f.prompt, len(f.pack)}, {longPrompt, len(long)}, {f.prompt, len(f.pack)}} {
		f.cache.DropRAM()
		f.eng.ClearSeq(0)
		r, err := f.cache.Restore(ctx, f.eng, 0, p.prompt, RestoreOptions{})
		if err != nil || r.Refused != nil || r.Tokens != p.n || r.FromRAM {
			t.Fatalf("restore %d from Badger: %+v, %v", i, r, err)
		}
		got, err := f.eng.SaveSeq(0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[p.n]) {
			t.Fatalf("restore %d (%d tokens) from a reused buffer: state differs from the stored one", i, p.n)
		}
		if ram, _, _ := f.cache.Stats(); ram != 0 {
			t.Fatalf("restore %d: a state read from Badger for a restore is cached in RAM (%d bytes)", i, ram)
		}
		// the shorter pack's buffer is kept beside the longer one's
		if n := len(f.cache.bufs.bufs); n != min(i+1, 2) {
			t.Fatalf("restore %d: %d buffers kept, want %d", i, n, min(i+1, 2))
		}
	}
	if got := f.generate(t, len(f.pack)); got != f.cold {
		t.Fatalf("after the restores: output %q, cold %q", got, f.cold)
	}
}
