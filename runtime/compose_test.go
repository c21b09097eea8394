package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

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

// argmaxAt decodes toks at positions [pos0, pos0+len(toks)) of seq with
// logits on every token and returns the argmax of each row.
func argmaxAt(t testing.TB, e *Engine, seq int, toks []Token, pos0 int) []Token {
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
	out := make([]Token, len(toks))
	var row []float32
	for i := range toks {
		row = e.ctx.Logits(i, row)
		best := 0
		for k, v := range row {
			if v > row[best] {
				best = k
			}
		}
		out[i] = Token(best)
	}
	return out
}

// composeFixture holds a loaded engine and the chunks of composeMemories.
type composeFixture struct {
	e      *Engine
	pre    Preamble
	chunks []Chunk
	query  []Token
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
	want := argmaxAt(t, e, 0, forced, n)
	e.ClearSeq(0)

	res, err := e.ComposeSeq(ctx, 1, 2, f.pre, chunks, o)
	if err != nil {
		t.Fatal(err)
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

// BenchmarkComposeQuality prints, for 30 ordered pairs of stories260K
// memories plus a query, how composed KV agrees with a full prefill of the
// same tokens under each recompute rule: top-1 next-token agreement over
// the query positions and 24 teacher-forced continuation positions, the
// share of pairs whose 24 greedy tokens all equal the full prefill's,
// the mean share of leading greedy tokens that equal, and the fraction of
// chunk tokens decoded again. Chunks are prefilled after the BOS preamble
// (and, in the "alone" rows, from position 0 without it).
//
//	go test -run '^$' -bench ComposeQuality -benchtime 1x ./runtime/
func BenchmarkComposeQuality(b *testing.B) {
	e, err := Load(context.Background(), Options{ModelPath: testmodels.Stories(b), Threads: 2, NCtx: 512, NSeqMax: 3, BlendProbe: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	after := newComposeFixture(b, e, false)
	alone := newComposeFixture(b, e, true)
	const nGreedy = 24
	rows := []struct {
		name string
		f    *composeFixture
		o    ComposeOptions
	}{
		{"shift only", after, ComposeOptions{Head: -1, Tail: -1, Ratio: -1}},
		{"shift only, chunks alone", alone, ComposeOptions{Head: -1, Tail: -1, Ratio: -1}},
		{"tail 4", after, ComposeOptions{Head: -1, Tail: 4, Ratio: -1}},
		{"head 2 tail 2", after, ComposeOptions{Head: 2, Tail: 2, Ratio: -1}},
		{"head 4 tail 2", after, ComposeOptions{Head: 4, Tail: 2, Ratio: -1}},
		{"blend 0.10", after, ComposeOptions{Head: -1, Tail: -1, Ratio: 0.10}},
		{"blend 0.15", after, ComposeOptions{Head: -1, Tail: -1, Ratio: 0.15}},
		{"head 2 tail 2 + blend to 0.15", after, ComposeOptions{Head: 2, Tail: 2, Ratio: 0.15}},
		{"head 1 tail 1 + blend to 0.15", after, ComposeOptions{Head: 1, Tail: 1, Ratio: 0.15}},
		{"default", after, ComposeOptions{}},
		{"default, chunks alone", alone, ComposeOptions{}},
	}
	for range b.N {
		fmt.Fprintf(os.Stdout, "%-34s %8s %8s %8s %10s\n", "rule", "top1", "greedy", "prefix", "recomputed")
		for _, r := range rows {
			s := r.f.pairs(b, r.o, nGreedy)
			fmt.Fprintf(os.Stdout, "%-34s %7.1f%% %7.1f%% %7.1f%% %9.1f%%\n", r.name, 100*s.top1, 100*s.greedy, 100*s.prefix, 100*s.recomputed)
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

var _ = errors.Is
var _ = llama.TypeF16
