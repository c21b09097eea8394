package runtime

import (
	"bytes"
	"context"
	"testing"
)

// An engine with one sequence runs without llama.cpp's unified KV cache
// (Options.NSeqMax); its sequence state has the same layout as a unified
// engine's, so a state saved by either restores into the other and
// decodes the same tokens as a cold prefill.
func TestSingleSeqStateMatchesUnified(t *testing.T) {
	multi := openStories(t, Options{NCtx: 512, NSeqMax: 3})
	single := openStories(t, Options{NCtx: 512, NSeqMax: 1})
	if err := multi.KVConfig().Compatible(single.KVConfig(), 1); err != nil {
		t.Fatalf("unified vs single-sequence KV config: %v", err)
	}
	if err := single.KVConfig().Compatible(multi.KVConfig(), 1); err != nil {
		t.Fatalf("single-sequence vs unified KV config: %v", err)
	}
	ctx := context.Background()
	prefix, _ := multi.Tokenize("Lily had a red ball. Tom had a blue kite. They played in the park every day.", true)
	query, _ := multi.Tokenize(" One day, Lily", false)
	all := append(append([]Token{}, prefix...), query...)

	// the same prefix in sequence 0 of both: byte-identical states
	for _, e := range []*Engine{multi, single} {
		if err := e.Prefill(ctx, 0, prefix, 0); err != nil {
			t.Fatal(err)
		}
	}
	sm, err := multi.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := single.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sm, ss) {
		t.Fatalf("states differ: unified %d bytes, single-sequence %d bytes", len(sm), len(ss))
	}

	multi.ClearSeq(0)
	single.ClearSeq(0)
	cold := greedy(t, single, 0, all, 0, 40)
	if coldMulti := greedy(t, multi, 0, all, 0, 40); coldMulti.Text != cold.Text {
		t.Fatalf("cold outputs differ:\nunified %q\nsingle  %q", coldMulti.Text, cold.Text)
	}

	// a state saved from sequence 2 of the unified engine restores into the
	// single-sequence engine, and the other way round into sequence 1
	multi.ClearSeq(0)
	if err := multi.Prefill(ctx, 2, prefix, 0); err != nil {
		t.Fatal(err)
	}
	s2, err := multi.SaveSeq(2)
	if err != nil {
		t.Fatal(err)
	}
	single.ClearSeq(0)
	if n, err := single.RestoreSeq(0, s2); err != nil || n != len(prefix) {
		t.Fatalf("restore into single-sequence: %d cells, %v", n, err)
	}
	warm := greedy(t, single, 0, all, len(prefix), 40)
	if warm.CachedTokens != len(prefix) || warm.Text != cold.Text {
		t.Fatalf("restored in single-sequence: cached %d (want %d)\n%q\nwant %q", warm.CachedTokens, len(prefix), warm.Text, cold.Text)
	}
	if n, err := multi.RestoreSeq(1, ss); err != nil || n != len(prefix) {
		t.Fatalf("restore into unified: %d cells, %v", n, err)
	}
	warm = greedy(t, multi, 1, all, len(prefix), 40)
	if warm.CachedTokens != len(prefix) || warm.Text != cold.Text {
		t.Fatalf("restored in unified: cached %d (want %d)\n%q\nwant %q", warm.CachedTokens, len(prefix), warm.Text, cold.Text)
	}
}

// FlashAttn "auto" turns flash attention off on the CPU for stories260K
// (V stored transposed): its KQ buffer is within FlashAttnOffMaxKQ at every
// n_ctx it can have (2,048 cells x 2,048-token micro-batches x 8 heads x
// 4 B = 128 MiB at most); "on" and "off" are taken as given. (Quantized K
// or V caches, which keep llama.cpp's auto, cannot be made for this model:
// its heads are 8 elements wide, q8_0 blocks 32.)
func TestFlashAttnAuto(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     Options
		trans bool
	}{
		{"auto", Options{NCtx: 512}, true},
		{"on", Options{NCtx: 512, FlashAttn: "on"}, false},
		{"off", Options{NCtx: 512, FlashAttn: "off"}, true},
		{"auto f32 KV", Options{NCtx: 512, TypeK: "f32", TypeV: "f32"}, true},
		{"auto largest KQ", Options{NCtx: 2048, NBatch: 2048, NUBatch: 2048}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := openStories(t, tc.o)
			if got := e.KVConfig().VTrans; got != tc.trans {
				t.Fatalf("v_trans %v, want %v", got, tc.trans)
			}
			toks, _ := e.Tokenize("Once upon a time", true)
			if r := greedy(t, e, 0, toks, 0, 8); r.EvalTokens != 8 {
				t.Fatalf("%d tokens", r.EvalTokens)
			}
		})
	}
}

// The bound FlashAttn "auto" applies on the CPU, at the shapes it was
// chosen for: 32 heads (the 1B shape, Llama 3's 1B and 8B) at n_ctx up to
// 8,192 with the default n_ubatch; past that flash attention stays on.
func TestFlashAttnAutoOff(t *testing.T) {
	for _, tc := range []struct {
		nctx, nubatch, nhead int
		kq                   int64
		off                  bool
	}{
		{4096, 512, 32, 256 << 20, true},
		{8192, 512, 32, 512 << 20, true},
		{8448, 512, 32, 528 << 20, false},
		{16384, 512, 32, 1 << 30, false},
		{16384, 256, 32, 512 << 20, true},
		{2048, 512, 8, 32 << 20, true},
		{131072, 512, 8, 2 << 30, false},
	} {
		kq, off := FlashAttnAutoOff(tc.nctx, tc.nubatch, tc.nhead)
		if kq != tc.kq || off != tc.off {
			t.Errorf("FlashAttnAutoOff(%d, %d, %d) = %d, %v; want %d, %v", tc.nctx, tc.nubatch, tc.nhead, kq, off, tc.kq, tc.off)
		}
	}
}
