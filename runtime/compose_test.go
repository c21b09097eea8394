package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/bench/gguf"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

// composeMemories are six TinyStories-like memories of 17-22 stories260K
// tokens each; their 30 ordered pairs are the composition benchmark.
var composeMemories = []string{
	" Lily had a red ball. She liked to play with it.",
	" Tom was a big dog. He liked to bark at birds.",
	" The sun was hot. Mom gave Ben a drink.",
	" A bird was sad. Sue gave it some food.",
	" The old man had a small boat on the lake.",
	" Anna found a key under a rock.",
}

// composeQuery follows the memories in every case.
const composeQuery = " One day, they went to the park and"

// composeCase is the outcome of one composed request against a full
// prefill of the same tokens.
type composeCase struct {
	agree, positions int  // top-1 agreements over the query and teacher-forced continuation positions
	greedySame       bool // all greedy tokens equal
	greedyPrefix     int  // leading greedy tokens equal
	res              ComposeResult
}

// argmaxAt is Engine.ArgmaxAt, failing t on an error.
func argmaxAt(t testing.TB, e *Engine, seq int, toks []Token, pos0 int) []Token {
	t.Helper()
	out, err := e.ArgmaxAt(context.Background(), seq, toks, pos0)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// logprobsAt decodes toks at positions [pos0, pos0+len(toks)) of seq with
// logits on every token and returns each row's log-softmax.
func logprobsAt(t testing.TB, e *Engine, seq int, toks []Token, pos0 int) [][]float64 {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batch.Clear()
	for i, tok := range toks {
		if err := e.batch.Add(tok, pos0+i, seq, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ctx.Decode(e.batch); err != nil {
		t.Fatal(err)
	}
	out := make([][]float64, len(toks))
	var row []float32
	for i := range toks {
		row = e.ctx.Logits(i, row)
		m := float64(slices.Max(row))
		var s float64
		for _, v := range row {
			s += math.Exp(float64(v) - m)
		}
		lse := m + math.Log(s)
		out[i] = make([]float64, len(row))
		for k, v := range row {
			out[i][k] = float64(v) - lse
		}
	}
	return out
}

// argmax is the index of row's largest value (the first of equals).
func argmax(row []float64) int {
	best := 0
	for k, v := range row {
		if v > row[best] {
			best = k
		}
	}
	return best
}

// composeFixture holds a loaded engine and the chunks of composeMemories.
type composeFixture struct {
	e      *Engine
	pre    Preamble
	chunks []Chunk
	query  []Token
	// oracle, when > 0, recomputes that many moved tokens chosen by their
	// V deviation from a full prefill summed over every layer (an upper
	// bound for any selection from the KV alone; experiment only)
	oracle int
	// outcome, when > 0, recomputes that many moved tokens chosen by
	// outcomeOracle (experiment only)
	outcome int
	// outcomeGreedy makes outcomeOracle rank by the greedy prefix first
	outcomeGreedy bool
	// scratch are ComposeSeq's scratch sequences; nil means {2}
	scratch []int
}

func newComposeFixture(t testing.TB, e *Engine, alone bool) *composeFixture {
	t.Helper()
	ctx := context.Background()
	bos := []Token{e.BOS()}
	pre, err := e.PrefillPreamble(ctx, 0, bos)
	if err != nil {
		t.Fatal(err)
	}
	f := &composeFixture{e: e, pre: pre}
	chunkPre := pre
	if alone {
		chunkPre = Preamble{}
	}
	for _, m := range composeMemories {
		toks, err := e.Tokenize(m, false)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.PrefillChunk(ctx, 0, chunkPre, toks)
		if err != nil {
			t.Fatal(err)
		}
		f.chunks = append(f.chunks, c)
	}
	if f.query, err = e.Tokenize(composeQuery, false); err != nil {
		t.Fatal(err)
	}
	return f
}

// run composes chunks (indices into f.chunks) in seq 1 with scratch 2,
// and compares it with a full prefill in seq 0: top-1 over the query
// positions and nGreedy teacher-forced continuation positions, and nGreedy
// greedy tokens.
func (f *composeFixture) run(t testing.TB, order []int, o ComposeOptions, nGreedy int) composeCase {
	t.Helper()
	e, ctx := f.e, context.Background()
	var chunks []Chunk
	full := slices.Clone(f.pre.Tokens)
	for _, i := range order {
		chunks = append(chunks, f.chunks[i])
		full = append(full, f.chunks[i].Tokens...)
	}
	n := len(full)
	full = append(full, f.query...)
	// reference: full prefill, greedy continuation
	e.ClearSeq(0)
	ref, err := e.Generate(ctx, Request{Seq: 0, Tokens: full, MaxTokens: nGreedy})
	if err != nil {
		t.Fatal(err)
	}
	forced := append(slices.Clone(f.query), ref.Tokens[:len(ref.Tokens)-1]...)
	if err := e.TruncateSeq(0, n); err != nil {
		t.Fatal(err)
	}
	var wantRows [][]float64
	if f.outcome > 0 {
		wantRows = logprobsAt(t, e, 0, forced, n)
		if err := e.TruncateSeq(0, n); err != nil {
			t.Fatal(err)
		}
	}
	want := argmaxAt(t, e, 0, forced, n)
	e.ClearSeq(0)

	var oracleRedo []int
	if f.outcome > 0 {
		oracleRedo = f.outcomeOracle(t, order, f.outcome, forced, wantRows)
		o = ComposeOptions{Ratio: -1}
	}
	var fullState []byte
	if f.oracle > 0 {
		e.ClearSeq(0)
		if err := e.Prefill(ctx, 0, full[:n], 0); err != nil {
			t.Fatal(err)
		}
		if fullState, err = e.SaveSeq(0); err != nil {
			t.Fatal(err)
		}
		e.ClearSeq(0)
		o = ComposeOptions{Head: -1, Tail: -1, Ratio: -1}
	}
	scratch := f.scratch
	if scratch == nil {
		scratch = []int{2}
	}
	res, err := e.ComposeSeq(ctx, 1, scratch, f.pre, chunks, o)
	if err != nil {
		t.Fatal(err)
	}
	if f.oracle > 0 {
		dev := map[int]float64{}
		var cand []int
		pos := len(f.pre.Tokens) + len(chunks[0].Tokens)
		for _, c := range chunks[1:] {
			for l := range e.kv.NLayer {
				fv, _, err := seqStateV(fullState, l)
				if err != nil {
					t.Fatal(err)
				}
				cv, _, _ := seqStateV(c.State, l)
				for k := range c.Tokens {
					for j := range cv[k] {
						x := float64(fv[pos+k][j] - cv[k][j])
						dev[pos+k] += x * x
					}
				}
			}
			for k := range c.Tokens {
				cand = append(cand, pos+k)
			}
			pos += len(c.Tokens)
		}
		slices.SortFunc(cand, func(a, b int) int { return cmp.Compare(dev[b], dev[a]) })
		oracleRedo = slices.Clone(cand[:min(f.oracle, len(cand))])
		slices.Sort(oracleRedo)
	}
	if f.oracle > 0 || f.outcome > 0 { // the oracles' choice, recomputed
		e.mu.Lock()
		_, err := e.recomputeLocked(ctx, 1, []int{2}, res.Tokens, oracleRedo)
		e.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		res.Recomputed = len(oracleRedo)
	}
	if !slices.Equal(res.Tokens, full[:n]) {
		t.Fatalf("composed tokens differ from the full prompt")
	}
	got := argmaxAt(t, e, 1, forced, n)
	if err := e.TruncateSeq(1, n); err != nil {
		t.Fatal(err)
	}
	gen, err := e.Generate(ctx, Request{Seq: 1, Tokens: full, NPast: n, MaxTokens: nGreedy})
	if err != nil {
		t.Fatal(err)
	}
	e.ClearSeq(1)
	c := composeCase{positions: len(want), res: res}
	for i := range want {
		if got[i] == want[i] {
			c.agree++
		}
	}
	for c.greedyPrefix < min(len(gen.Tokens), len(ref.Tokens)) && gen.Tokens[c.greedyPrefix] == ref.Tokens[c.greedyPrefix] {
		c.greedyPrefix++
	}
	c.greedySame = slices.Equal(gen.Tokens, ref.Tokens)
	return c
}

// composeSummary aggregates cases over the 30 ordered pairs.
type composeSummary struct {
	top1, greedy, prefix, recomputed float64
}

func (f *composeFixture) pairs(t testing.TB, o ComposeOptions, nGreedy int) composeSummary {
	var agree, pos, same, prefix, redo, chunkToks int
	cases := 0
	for a := range f.chunks {
		for b := range f.chunks {
			if a == b {
				continue
			}
			c := f.run(t, []int{a, b}, o, nGreedy)
			agree += c.agree
			pos += c.positions
			if c.greedySame {
				same++
			}
			prefix += c.greedyPrefix
			redo += c.res.Recomputed
			chunkToks += c.res.ChunkTokens
			cases++
		}
	}
	return composeSummary{
		top1:       float64(agree) / float64(pos),
		greedy:     float64(same) / float64(cases),
		prefix:     float64(prefix) / float64(cases*nGreedy),
		recomputed: float64(redo) / float64(chunkToks),
	}
}

// BenchmarkComposeQuality prints, for the 30 ordered pairs of six
// stories260K memories (17-24 tokens) plus a 9-token query, how composed
// KV agrees with a full prefill of the same tokens under each recompute
// rule:
//
//   - top1: top-1 next-token agreement over the query positions and the
//     23 teacher-forced positions of the full prefill's greedy
//     continuation (32 positions a pair, 960 in all);
//   - greedy: the share of pairs whose 24 greedy tokens all equal the
//     full prefill's (the strict reading of "greedy 24-token match");
//   - prefix: the mean share of leading greedy tokens that equal;
//   - recomputed: chunk tokens decoded again / chunk tokens.
//
// Chunks are prefilled after the BOS preamble ("alone": from position 0
// without it; "filler": after BOS and an unrelated sentence, shifted back).
// The oracle row ranks moved tokens by their V deviation from the full
// prefill summed over every layer: the best any selection from the KV
// alone can do at that budget. The guard row runs with ShiftGuard's
// verdict for q8_0 K: no shift, moved chunks recomputed at their place.
// Target (issue 15): top1 >= 99% and greedy >= 95% at <= 15% recomputed.
// Threads 1: the figures are the same with more, faster alone.
//
//	go test -run '^$' -bench ComposeQuality -benchtime 1x ./runtime/
func BenchmarkComposeQuality(b *testing.B) {
	load := func() *Engine {
		e, err := Load(context.Background(), Options{ModelPath: testmodels.Stories(b), Threads: 1, NCtx: 512, NSeqMax: 16, BlendProbe: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { e.Close() })
		return e
	}
	e := load()
	after := newComposeFixture(b, e, false)
	alone := newComposeFixture(b, e, true)
	parallel := *after
	for s := 2; s < 16; s++ {
		parallel.scratch = append(parallel.scratch, s)
	}
	oracle := *after
	oracle.oracle = 6 // of 41 chunk tokens on average: 14.6%
	filler := *after
	filler.chunks = nil
	ft, err := e.Tokenize(" The cat sat on the mat. It was a sunny day.", false)
	if err != nil {
		b.Fatal(err)
	}
	fp, err := e.PrefillPreamble(context.Background(), 0, append([]Token{e.BOS()}, ft...))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range after.chunks {
		fc, err := e.PrefillChunk(context.Background(), 0, fp, c.Tokens)
		if err != nil {
			b.Fatal(err)
		}
		filler.chunks = append(filler.chunks, fc)
	}
	// stories260K's 8-wide heads cannot hold q8_0 K (ggml asserts): the
	// guard row sets the verdict Load gives a q8_0-K engine (the seam
	// TestComposeGuardPath also uses; the refusal itself is tested there
	// on a generated model)
	ge := load()
	ge.shiftErr = ShiftGuard(ge.model.Attention(), KVConfig{TypeK: "q8_0"}, true)
	guarded := newComposeFixture(b, ge, false)
	none := ComposeOptions{Ratio: -1}
	const nGreedy = 24
	rows := []struct {
		name string
		f    *composeFixture
		o    ComposeOptions
	}{
		{"shift only", after, none},
		{"shift only, chunks alone", alone, none},
		{"shift only, filler", &filler, none},
		{"tail 4", after, ComposeOptions{Tail: 4, Ratio: -1}},
		{"head 2 tail 2", after, ComposeOptions{Head: 2, Tail: 2, Ratio: -1}},
		{"head 4 tail 2", after, ComposeOptions{Head: 4, Tail: 2, Ratio: -1}},
		{"head 2 tail 2 + blend to 0.15, L1", after, ComposeOptions{Head: 2, Tail: 2, Ratio: 0.15}},
		{"blend 0.15, probe layer 2", after, ComposeOptions{ProbeLayer: 2}},
		{"blend 0.15, probe layer 2, no gap merge", after, ComposeOptions{ProbeLayer: 2, Gap: -1}},
		{"blend 0.15, L1, no gap merge", after, ComposeOptions{Gap: -1}},
		{"blend 0.15, L1, gap 4", after, ComposeOptions{Gap: 4}},
		{"blend 0.15, probe layer 1 (default)", after, ComposeOptions{}},
		{"blend 0.15, L1, gap 16", after, ComposeOptions{Gap: 16}},
		{"blend 0.15, L1, waves of 14 runs", &parallel, ComposeOptions{}},
		{"blend 0.15, L1, no gap merge, waves", &parallel, ComposeOptions{Gap: -1}},
		{"blend 0.15, L1, chunks alone", alone, ComposeOptions{}},
		{"blend 0.15, L1, filler", &filler, ComposeOptions{}},
		{"oracle 6 tokens (all-layer V dev.)", &oracle, ComposeOptions{}},
		{"blend 0.25, L1", after, ComposeOptions{Ratio: 0.25}},
		{"blend 0.35, L1", after, ComposeOptions{Ratio: 0.35}},
		{"blend 0.40, L1", after, ComposeOptions{Ratio: 0.40}},
		{"blend 0.40, L1, no gap merge", after, ComposeOptions{Ratio: 0.40, Gap: -1}},
		{"blend 0.40, L2, no gap merge", after, ComposeOptions{Ratio: 0.40, ProbeLayer: 2, Gap: -1}},
		{"whole moved chunk", after, ComposeOptions{Head: 1000, Ratio: -1}},
		{"guard (q8_0 K verdict): recompute", guarded, ComposeOptions{}},
	}
	for range b.N {
		fmt.Fprintf(os.Stdout, "%-38s %7s %7s %7s %10s\n", "rule (30 ordered pairs)", "top1", "greedy", "prefix", "recomputed")
		for _, r := range rows {
			s := r.f.pairs(b, r.o, nGreedy)
			fmt.Fprintf(os.Stdout, "%-38s %6.1f%% %6.1f%% %6.1f%% %9.1f%%\n", r.name, 100*s.top1, 100*s.greedy, 100*s.prefix, 100*s.recomputed)
			if r.o == (ComposeOptions{}) && r.f == after {
				b.ReportMetric(100*s.top1, "top1_%")
				b.ReportMetric(100*s.greedy, "greedy_%")
				b.ReportMetric(100*s.recomputed, "recomputed_%")
			}
		}
	}
}

func TestComposeMemoryLengths(t *testing.T) {
	e := openStories(t, Options{NCtx: 256})
	for _, m := range composeMemories {
		toks, err := e.Tokenize(m, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d tokens: %q", len(toks), m)
		if len(toks) < 15 || len(toks) > 25 {
			t.Errorf("%q: %d tokens, want about 20", m, len(toks))
		}
	}
}

func TestShiftGuard(t *testing.T) {
	llamaRope := llama.Attention{Arch: "llama", RopeType: llama.RopeTypeNorm}
	f16 := KVConfig{TypeK: "f16", TypeV: "f16"}
	for _, tc := range []struct {
		name     string
		a        llama.Attention
		kv       KVConfig
		canShift bool
		refused  bool
	}{
		{"llama f16", llamaRope, f16, true, false},
		{"neox f32", llama.Attention{RopeType: llama.RopeTypeNeoX}, KVConfig{TypeK: "f32"}, true, false},
		{"quantized K q8_0", llamaRope, KVConfig{TypeK: "q8_0", TypeV: "f16"}, true, true},
		{"quantized K q4_0", llamaRope, KVConfig{TypeK: "q4_0", TypeV: "f16"}, true, true},
		{"quantized V only", llamaRope, KVConfig{TypeK: "f16", TypeV: "q8_0"}, true, false},
		{"M-RoPE", llama.Attention{RopeType: llama.RopeTypeMRoPE}, f16, true, true},
		{"interleaved M-RoPE", llama.Attention{RopeType: llama.RopeTypeIMRoPE}, f16, true, true},
		{"rope sections declared", llama.Attention{RopeType: llama.RopeTypeNorm, RopeSections: true}, f16, true, true},
		{"no RoPE", llama.Attention{RopeType: llama.RopeTypeNone}, f16, true, true},
		{"sliding window", llama.Attention{RopeType: llama.RopeTypeNorm, NSWA: 4096}, f16, true, true},
		{"sliding window declared", llama.Attention{RopeType: llama.RopeTypeNorm, SlidingWindowMeta: true}, f16, true, true},
		{"hybrid", llama.Attention{RopeType: llama.RopeTypeNorm, Hybrid: true}, f16, true, true},
		{"recurrent", llama.Attention{RopeType: llama.RopeTypeNorm, Recurrent: true}, f16, true, true},
		{"MLA", llama.Attention{RopeType: llama.RopeTypeNorm, KVLoraRank: 512}, f16, true, true},
		{"cache cannot shift", llamaRope, f16, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ShiftGuard(tc.a, tc.kv, tc.canShift)
			if tc.refused != (err != nil) {
				t.Fatalf("ShiftGuard = %v, want refused=%v", err, tc.refused)
			}
			if err != nil && !errors.Is(err, ErrNoShift) {
				t.Fatalf("%v does not wrap ErrNoShift", err)
			}
		})
	}
}

func openCompose(t *testing.T, typeK string, probe bool) *Engine {
	fa := "auto"
	if typeK != "f16" {
		fa = "on" // llama.cpp quantizes K only with flash attention
	}
	return openStories(t, Options{Threads: 1, NCtx: 512, NSeqMax: 5, BlendProbe: probe, TypeK: typeK, FlashAttn: fa})
}

// stories260K is a llama with normal RoPE: the shift is allowed at f16.
// Its 8-wide heads cannot hold q8_0 K (ggml asserts), so the refusal of
// quantized K is checked on a generated llama with 64-wide heads, and
// the recompute path on stories260K through the guard seam (shiftErr, set
// as Load sets it): every moved chunk is decoded in full at its new
// position and agrees with a full prefill exactly.
func TestComposeGuardPath(t *testing.T) {
	e := openCompose(t, "f16", true)
	if err := e.ShiftGuard(); err != nil {
		t.Fatalf("f16 stories260K: %v", err)
	}
	e.shiftErr = ShiftGuard(e.model.Attention(), KVConfig{TypeK: "q8_0"}, true)
	f := newComposeFixture(t, e, false)
	for _, order := range [][]int{{0, 1}, {3, 2}, {5, 4, 1}} {
		c := f.run(t, order, ComposeOptions{}, 24)
		moved := c.res.ChunkTokens - len(f.chunks[order[0]].Tokens)
		if !errors.Is(c.res.Guard, ErrNoShift) || c.res.Moved != moved || c.res.Recomputed != moved || c.res.Probed != 0 {
			t.Fatalf("%v: guard %v, moved %d, recomputed %d, probed %d; want ErrNoShift, %d, %d, 0", order, c.res.Guard, c.res.Moved, c.res.Recomputed, c.res.Probed, moved, moved)
		}
		if c.agree != c.positions || !c.greedySame {
			t.Fatalf("%v: top-1 %d/%d, greedy same %v; want exact", order, c.agree, c.positions, c.greedySame)
		}
	}

	// generated llamas that need the guard: quantized K, and metadata
	// declaring M-RoPE sections or a sliding window (which the llama
	// architecture itself ignores: the guard reads the declaration)
	for _, tc := range []struct {
		name, typeK, why string
		meta             map[string]any
	}{
		{"q8_0 K", "q8_0", "quantized K", nil},
		{"M-RoPE sections", "f16", "multi-section RoPE", map[string]any{"llama.rope.dimension_sections": []int32{16, 24, 24, 0}}},
		{"sliding window", "f16", "sliding-window", map[string]any{"llama.attention.sliding_window": uint32(64)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "guard.gguf")
			spec := gguf.Spec{NLayer: 2, NEmbd: 128, NHead: 2, NHeadKV: 1, NFF: 128, NCtxTrain: 512, Meta: tc.meta}
			if err := gguf.Write(t.Context(), path, spec, testmodels.Path(t, "llama-2-tiny-random.gguf"), 1); err != nil {
				t.Fatal(err)
			}
			fa := "auto"
			if tc.typeK != "f16" {
				fa = "on"
			}
			q, err := Load(t.Context(), Options{ModelPath: path, Threads: 1, NCtx: 256, NSeqMax: 3, TypeK: tc.typeK, FlashAttn: fa})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if err := q.ShiftGuard(); !errors.Is(err, ErrNoShift) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("ShiftGuard = %v, want ErrNoShift naming %q", err, tc.why)
			}
			pre, err := q.PrefillPreamble(t.Context(), 0, []Token{q.BOS()})
			if err != nil {
				t.Fatal(err)
			}
			var chunks []Chunk
			for _, m := range composeMemories[:2] {
				toks, _ := q.Tokenize(m, false)
				c, err := q.PrefillChunk(t.Context(), 0, pre, toks)
				if err != nil {
					t.Fatal(err)
				}
				chunks = append(chunks, c)
			}
			res, err := q.ComposeSeq(t.Context(), 1, []int{2}, pre, chunks, ComposeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(res.Guard, ErrNoShift) || res.Moved != len(chunks[1].Tokens) || res.Recomputed != len(chunks[1].Tokens) ||
				res.Probed != 0 || q.SeqLen(1) != len(res.Tokens) {
				t.Fatalf("%+v, seq holds %d positions", res, q.SeqLen(1))
			}
		})
	}
}

// On the 30 ordered pairs the default rule (blend 0.15, probe layer 1,
// gap 8) recomputes at most 15.5% of chunk tokens and beats shifting
// alone; at a 40% budget without gap merging, probing layer 2, it reaches
// the quality targets. Figures measured by
// BenchmarkComposeQuality: shift only 94.8% / 23.3%, default 98.0% /
// 63.3% at 15.2% (97.9% / 60.0% in waves), blend 0.40 without merging
// 99.6% / 96.7% at layer 2 (99.5% / 93.3% at layer 1).
func TestComposeAgreement(t *testing.T) {
	e := openCompose(t, "f16", true)
	f := newComposeFixture(t, e, false)
	shift := f.pairs(t, ComposeOptions{Ratio: -1}, 24)
	def := f.pairs(t, ComposeOptions{}, 24)
	if shift.recomputed != 0 || def.recomputed > 0.155 || def.recomputed < 0.14 {
		t.Fatalf("recomputed: shift only %.3f, default %.3f", shift.recomputed, def.recomputed)
	}
	if def.top1 < 0.975 || def.top1 <= shift.top1 || def.greedy < 0.6 || def.greedy <= shift.greedy {
		t.Fatalf("default top1 %.3f greedy %.3f, shift only %.3f %.3f", def.top1, def.greedy, shift.top1, shift.greedy)
	}
	wide := f.pairs(t, ComposeOptions{Ratio: 0.40, ProbeLayer: 2, Gap: -1}, 24)
	if wide.top1 < 0.99 || wide.greedy < 0.95 {
		t.Fatalf("blend 0.40: top1 %.3f greedy %.3f, want >= 0.99, 0.95", wide.top1, wide.greedy)
	}
	// three chunks, middle and last moved: runs of recompute in the middle
	c := f.run(t, []int{2, 0, 4}, ComposeOptions{Ratio: 0.3}, 24)
	if c.res.Recomputed == 0 || c.res.Probed != c.res.Moved || c.agree < c.positions*9/10 {
		t.Fatalf("three chunks: %+v, top-1 %d/%d", c.res, c.agree, c.positions)
	}
}

// Recomputed runs share a llama_decode per wave of scratch sequences: the
// same positions, ceil(runs/waves) decodes instead of one per run, every
// scratch sequence left empty; a single run gives the sequential path's
// state byte for byte.
func TestComposeWaves(t *testing.T) {
	e := openCompose(t, "f16", false)
	f := newComposeFixture(t, e, false)
	ctx := context.Background()
	three := []Chunk{f.chunks[2], f.chunks[0], f.chunks[4]}
	// heads of the two moved chunks and the tail: three runs
	o := ComposeOptions{Head: 2, Tail: 2, Ratio: -1}
	seqRes, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, three, o)
	if err != nil {
		t.Fatal(err)
	}
	waveRes, err := e.ComposeSeq(ctx, 1, []int{2, 3, 4}, f.pre, three, o)
	if err != nil {
		t.Fatal(err)
	}
	n0, n1, n2 := len(three[0].Tokens), len(three[1].Tokens), len(three[2].Tokens)
	want := []int{1 + n0, 2 + n0, 1 + n0 + n1, 2 + n0 + n1, n0 + n1 + n2 - 1, n0 + n1 + n2}
	if !slices.Equal(seqRes.Positions, want) || !slices.Equal(waveRes.Positions, want) {
		t.Fatalf("positions: sequential %v, waves %v, want %v", seqRes.Positions, waveRes.Positions, want)
	}
	if seqRes.RecomputeDecodes != 3 || waveRes.RecomputeDecodes != 1 {
		t.Fatalf("decodes: sequential %d (want 3), waves %d (want 1)", seqRes.RecomputeDecodes, waveRes.RecomputeDecodes)
	}
	if e.SeqLen(1) != 1+n0+n1+n2 || e.SeqLen(2)+e.SeqLen(3)+e.SeqLen(4) != 0 {
		t.Fatalf("seq %d positions (want %d), scratch %d %d %d", e.SeqLen(1), 1+n0+n1+n2, e.SeqLen(2), e.SeqLen(3), e.SeqLen(4))
	}
	// two waves for three runs on two scratch sequences
	if r, err := e.ComposeSeq(ctx, 1, []int{3, 4}, f.pre, three, o); err != nil || r.RecomputeDecodes != 2 {
		t.Fatalf("two scratch: %d decodes, %v", r.RecomputeDecodes, err)
	}
	// one run (the tail): the same state as the sequential path
	tail := ComposeOptions{Tail: 3, Ratio: -1}
	if _, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, three, tail); err != nil {
		t.Fatal(err)
	}
	a, _ := e.SaveSeq(1)
	if _, err := e.ComposeSeq(ctx, 1, []int{4, 2, 3}, f.pre, three, tail); err != nil {
		t.Fatal(err)
	}
	b, _ := e.SaveSeq(1)
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("one run: states differ (%d and %d bytes)", len(a), len(b))
	}
	if _, err := e.ComposeSeq(ctx, 1, []int{2, 2}, f.pre, three, o); !errors.Is(err, ErrCompose) {
		t.Errorf("repeated scratch: %v", err)
	}
	if _, err := e.ComposeSeq(ctx, 1, nil, f.pre, three, o); !errors.Is(err, ErrCompose) {
		t.Errorf("no scratch: %v", err)
	}
}

func TestComposeErrors(t *testing.T) {
	e := openCompose(t, "f16", false)
	f := newComposeFixture(t, e, false)
	ctx := context.Background()
	two := []Chunk{f.chunks[0], f.chunks[1]}
	if _, err := e.ComposeSeq(ctx, 1, []int{1}, f.pre, two, ComposeOptions{Ratio: -1}); !errors.Is(err, ErrCompose) {
		t.Errorf("seq == scratch: %v", err)
	}
	if _, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, two, ComposeOptions{}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("deviation ranking without BlendProbe: %v", err)
	}
	bad := f.chunks[1]
	bad.Pos0 = 0
	if _, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, []Chunk{f.chunks[0], bad}, ComposeOptions{Ratio: -1}); !errors.Is(err, ErrCompose) {
		t.Errorf("chunk with a wrong Pos0: %v", err)
	}
	if e.SeqLen(1) != 0 || e.SeqLen(2) != 0 {
		t.Errorf("after errors seq holds %d, scratch %d positions", e.SeqLen(1), e.SeqLen(2))
	}
	// head and tail alone need no probe
	res, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, two, ComposeOptions{Head: 2, Tail: 2, Ratio: -1})
	if err != nil {
		t.Fatal(err)
	}
	n0, n1 := len(two[0].Tokens), len(two[1].Tokens)
	want := []int{1 + n0, 2 + n0, n0 + n1 - 1, n0 + n1}
	if !slices.Equal(res.Positions, want) || e.SeqLen(1) != 1+n0+n1 || e.SeqLen(2) != 0 {
		t.Errorf("recomputed %v, want %v; seq %d scratch %d positions", res.Positions, want, e.SeqLen(1), e.SeqLen(2))
	}
}

func TestSliceSeqState(t *testing.T) {
	e := openCompose(t, "f16", false)
	toks, _ := e.Tokenize("Ben found a shiny stone by the river.", true)
	if err := e.Prefill(context.Background(), 0, toks, 0); err != nil {
		t.Fatal(err)
	}
	st, err := e.SaveSeq(0)
	if err != nil {
		t.Fatal(err)
	}
	whole, _ := ParseSeqState(st)
	for _, tc := range []struct{ p0, p1, n int }{{0, len(toks), len(toks)}, {3, 7, 4}, {5, 1000, len(toks) - 5}, {4, 4, 0}} {
		sl, err := SliceSeqState(st, tc.p0, tc.p1)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ParseSeqState(sl)
		if err != nil || s.NCells != tc.n {
			t.Fatalf("[%d, %d): %d cells, %v; want %d", tc.p0, tc.p1, s.NCells, err, tc.n)
		}
		for i, p := range s.Positions {
			if int(p) != tc.p0+i {
				t.Fatalf("[%d, %d): cell %d at %d", tc.p0, tc.p1, i, p)
			}
		}
		if tc.n == 0 {
			continue
		}
		// V rows of every layer are those of the same positions
		for l := range whole.NLayer {
			a, _, err := seqStateV(st, l)
			if err != nil {
				t.Fatal(err)
			}
			b, _, _ := seqStateV(sl, l)
			for i := range b {
				if !slices.Equal(a[tc.p0+i], b[i]) {
					t.Fatalf("[%d, %d) layer %d cell %d: V differs", tc.p0, tc.p1, l, i)
				}
			}
		}
	}
	if tr, _ := TruncateSeqState(st, 6); true {
		sl, _ := SliceSeqState(st, 0, 6)
		if !slices.Equal(tr, sl) {
			t.Error("SliceSeqState(0, 6) differs from TruncateSeqState(6)")
		}
	}
	if _, err := SliceSeqState(st, 5, 2); !errors.Is(err, ErrBadState) {
		t.Errorf("reversed range: %v", err)
	}
}

// runCover's cost is the number of positions it recomputes, whatever the
// order of choices, and two chosen positions at most gap apart are one run.
func TestRunCover(t *testing.T) {
	for _, tc := range []struct {
		gap    int
		chosen []int
		want   []int
	}{
		{0, []int{5, 3, 4, 9}, []int{3, 4, 5, 9}},
		{2, []int{10, 13, 17}, []int{10, 11, 12, 13, 17}},
		{3, []int{10, 17, 14}, []int{10, 11, 12, 13, 14, 15, 16, 17}},
		{3, []int{10, 14, 12}, []int{10, 11, 12, 13, 14}}, // 12 was filled already
		{8, []int{40}, []int{40}},
	} {
		t.Run(fmt.Sprint(tc.gap, tc.chosen), func(t *testing.T) {
			c := runCover{gap: tc.gap}
			for _, p := range tc.chosen {
				d := c.delta(p)
				before := c.cost
				c.add(p)
				if c.cost != before+d || c.cost != len(c.positions()) {
					t.Fatalf("after %d: cost %d (delta %d), %d positions", p, c.cost, d, len(c.positions()))
				}
			}
			if got := c.positions(); !slices.Equal(got, tc.want) {
				t.Fatalf("positions %v, want %v", got, tc.want)
			}
		})
	}
}

// A Held preamble composes after the cells seq already holds: the same
// positions and the same state, byte for byte, as restoring the preamble;
// an error removes only what composition added; a held length that is
// not what seq holds is refused before anything changes.
func TestComposeHeld(t *testing.T) {
	e := openCompose(t, "f16", true)
	f := newComposeFixture(t, e, false)
	ctx := context.Background()
	three := []Chunk{f.chunks[2], f.chunks[0], f.chunks[4]}
	o := ComposeOptions{Ratio: 0.15}
	want, err := e.ComposeSeq(ctx, 1, []int{2}, f.pre, three, o)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := e.SaveSeq(1)
	e.ClearSeq(1)
	if _, err := e.RestoreSeq(1, f.pre.State); err != nil {
		t.Fatal(err)
	}
	held := Preamble{Tokens: f.pre.Tokens, Held: true}
	got, err := e.ComposeSeq(ctx, 1, []int{2}, held, three, o)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := e.SaveSeq(1)
	if !slices.Equal(got.Positions, want.Positions) || !slices.Equal(got.Tokens, want.Tokens) || !slices.Equal(a, b) {
		t.Fatalf("held: positions %v tokens %d state %d bytes; restored: %v %d %d", got.Positions, len(got.Tokens), len(b),
			want.Positions, len(want.Tokens), len(a))
	}
	// a chunk that contradicts its positions: refused, the held cells kept
	e.ClearSeq(1)
	e.RestoreSeq(1, f.pre.State)
	bad := f.chunks[1]
	bad.Pos0 = 0
	if _, err := e.ComposeSeq(ctx, 1, []int{2}, held, []Chunk{f.chunks[0], bad}, o); !errors.Is(err, ErrCompose) {
		t.Fatalf("bad chunk: %v", err)
	}
	if n := e.SeqLen(1); n != len(f.pre.Tokens) {
		t.Fatalf("after the error seq holds %d positions, want the held %d", n, len(f.pre.Tokens))
	}
	long := Preamble{Tokens: append(slices.Clone(f.pre.Tokens), 1), Held: true}
	if _, err := e.ComposeSeq(ctx, 1, []int{2}, long, three, o); !errors.Is(err, ErrCompose) || e.SeqLen(1) != len(f.pre.Tokens) {
		t.Fatalf("held length mismatch: %v, seq holds %d", err, e.SeqLen(1))
	}
}
