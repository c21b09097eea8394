package kvcache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/runtime"
)

// seq1Baseline fills seq 1 with another conversation's prompt and returns
// its state and the greedy continuation it gives when run alone.
func seq1Baseline(t *testing.T, f *fixture) (toks []int32, state []byte, text string) {
	t.Helper()
	toks, _ = f.eng.Tokenize("Tom and his dog went to the park.", true)
	f.eng.ClearSeq(1)
	r, err := f.eng.Generate(context.Background(), runtime.Request{Seq: 1, Tokens: toks, MaxTokens: 30})
	if err != nil {
		t.Fatal(err)
	}
	f.eng.ClearSeq(1)
	if err := f.eng.Prefill(context.Background(), 1, toks[:len(toks)-1], 0); err != nil {
		t.Fatal(err)
	}
	state, _ = f.eng.SaveSeq(1)
	return toks, state, r.Text
}

// TestRestoreMissingBlob: a pack whose header survived but whose blob is
// gone is refused before llama.cpp sees anything, dropped, and the request
// falls back to prefill with the cold output; the next lookup is a clean
// miss.
func TestRestoreMissingBlob(t *testing.T) {
	f := newFixture(t)
	infos := f.cache.List("cube")
	if len(infos) != 1 {
		t.Fatalf("%d packs", len(infos))
	}
	err := f.db.Badger().Update(func(txn *bg.Txn) error { return txn.Delete(chunkKey(infos[0].ID, 0)) })
	if err != nil {
		t.Fatal(err)
	}
	f.cache.DropRAM()
	f.eng.Prefill(context.Background(), 0, f.pack[:4], 0) // junk in the target seq
	r, err := f.cache.Restore(context.Background(), f.eng, 0, f.prompt, RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Refused, ErrCorrupt) || r.Tokens != 0 || f.eng.SeqLen(0) != 0 {
		t.Fatalf("missing blob: %+v, seq 0 holds %d", r, f.eng.SeqLen(0))
	}
	if got := f.generate(t, 0); got != f.cold {
		t.Fatalf("fallback %q, cold %q", got, f.cold)
	}
	r, err = f.cache.Restore(context.Background(), f.eng, 0, f.prompt, RestoreOptions{})
	if err != nil || r.PackID != "" || r.Refused != nil || r.Tokens != 0 || f.eng.SeqLen(0) != 0 {
		t.Fatalf("after the refusal: %+v, %v, seq 0 holds %d; want a clean miss", r, err, f.eng.SeqLen(0))
	}
}

// TestRestoreEmptyState: an empty sequence state restores as a no-op that
// reports 0 cells, leaves the target empty and another sequence untouched;
// an empty pack never matches a prompt.
func TestRestoreEmptyState(t *testing.T) {
	f := newFixture(t)
	_, seq1, _ := seq1Baseline(t, f)
	f.eng.ClearSeq(0)
	empty, err := f.eng.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	f.eng.Prefill(context.Background(), 0, f.pack[:4], 0)
	n, err := f.eng.RestoreSeq(0, empty)
	if err != nil || n != 0 || f.eng.SeqLen(0) != 0 {
		t.Fatalf("RestoreSeq(empty) = %d, %v; seq 0 holds %d", n, err, f.eng.SeqLen(0))
	}
	if got, _ := f.eng.SaveSeq(1); !bytes.Equal(got, seq1) {
		t.Fatal("seq 1 changed")
	}
	info, err := f.cache.Put(context.Background(), Header{KV: f.eng.KVConfig(), Label: "empty"}, empty)
	if err != nil || info.NTokens != 0 {
		t.Fatalf("Put(empty) = %+v, %v", info, err)
	}
	r, err := f.cache.Restore(context.Background(), f.eng, 0, []int32{999, 998}, RestoreOptions{})
	if err != nil || r.PackID != "" || r.Tokens != 0 || r.Refused != nil {
		t.Fatalf("restore with only an empty pack stored: %+v, %v", r, err)
	}
}

// TestRestoreRefusedByLlamaCPP: a state that passes our parser (same row
// sizes) but that llama.cpp refuses (its K type is bf16, the context's
// f16) leaves the target sequence empty, never half restored, and seq 1
// byte-identical with the same greedy output.
func TestRestoreRefusedByLlamaCPP(t *testing.T) {
	f := newFixture(t)
	toks1, seq1, alone := seq1Baseline(t, f)
	f.eng.ClearSeq(0)
	if err := f.eng.Prefill(context.Background(), 0, f.pack, 0); err != nil {
		t.Fatal(err)
	}
	good, _ := f.eng.SaveSeq(0)
	st, err := runtime.ParseSeqState(good)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	off := 4 + 4 + 12*st.NCells + 8 // layer 0 K: type, row bytes, rows
	for l := 0; l < st.NLayer; l++ {
		if got := binary.LittleEndian.Uint32(bad[off:]); got != uint32(st.TypeK) {
			t.Fatalf("layer %d K type at %d is %d, parsed %d", l, off, got, st.TypeK)
		}
		binary.LittleEndian.PutUint32(bad[off:], 30) // GGML_TYPE_BF16, same row size
		off += 12 + st.KRowBytes*st.NCells
	}
	if _, err := runtime.ParseSeqState(bad); err != nil {
		t.Fatalf("the altered state should pass our parser: %v", err)
	}
	f.eng.Prefill(context.Background(), 0, f.pack[:3], 0)
	n, err := f.eng.RestoreSeq(0, bad)
	if !errors.Is(err, runtime.ErrBadState) || n != 0 {
		t.Fatalf("RestoreSeq = %d, %v", n, err)
	}
	if got := f.eng.SeqLen(0); got != 0 {
		t.Fatalf("seq 0 holds %d positions after llama.cpp refused the state", got)
	}
	if got, _ := f.eng.SaveSeq(1); !bytes.Equal(got, seq1) {
		t.Fatal("seq 1 changed")
	}
	r, err := f.eng.Generate(context.Background(), runtime.Request{Seq: 1, Tokens: toks1, NPast: len(toks1) - 1, MaxTokens: 30})
	if err != nil || r.Text != alone {
		t.Fatalf("seq 1 after the refusal: %q, %v; alone %q", r.Text, err, alone)
	}
	// the good state still restores into seq 0 and gives the cold output
	if n, err := f.eng.RestoreSeq(0, good); err != nil || n != len(f.pack) {
		t.Fatalf("good state: %d, %v", n, err)
	}
	if got := f.generate(t, len(f.pack)); got != f.cold {
		t.Fatalf("after the good restore %q, cold %q", got, f.cold)
	}
}

// TestDamagedRestoresDuringGeneration: while seq 1 generates, seq 0 is
// restored again and again from damaged and mismatched packs; seq 1's
// greedy output stays byte-identical to its output alone, and every
// refusal leaves seq 0 empty.
func TestDamagedRestoresDuringGeneration(t *testing.T) {
	f := newFixture(t)
	toks1, _, alone := seq1Baseline(t, f)
	f.eng.ClearSeq(1)
	good, err := f.cache.Blob(f.cache.List("cube")[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	_, state, _ := Decode(good)
	damaged := [][]byte{
		state[:len(state)-9],                     // truncated
		append(bytes.Clone(state), 1, 2, 3),      // extended
		append([]byte{7, 0, 0, 0}, state[4:]...), // 7 streams
	}
	var wg sync.WaitGroup
	var text string
	wg.Go(func() {
		r, err := f.eng.Generate(context.Background(), runtime.Request{Seq: 1, Tokens: toks1, MaxTokens: 30})
		if err != nil {
			t.Error(err)
		}
		text = r.Text
	})
	wg.Go(func() {
		for i := range 60 {
			if _, err := f.eng.RestoreSeq(0, damaged[i%len(damaged)]); !errors.Is(err, runtime.ErrBadState) {
				t.Errorf("damaged state %d: %v", i%len(damaged), err)
			}
			if n := f.eng.SeqLen(0); n != 0 {
				t.Errorf("seq 0 holds %d after a refused restore", n)
			}
		}
	})
	wg.Wait()
	if text != alone {
		t.Fatalf("seq 1 generated %q during refused restores, %q alone", text, alone)
	}
}
