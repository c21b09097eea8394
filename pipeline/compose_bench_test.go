package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
)

// composeWords make the benchmark's memories: each memory is the word
// "garden" (so the query retrieves all five) and a run of these words
// picked by a fixed LCG.
var composeWords = strings.Fields(`apple river stone window yellow quiet morning little basket forest cloud
	candle silver bridge kitten summer pencil blanket harbor meadow lantern orange puzzle rabbit thunder
	violin whisper button castle dragon feather garden honey island jacket ladder marble needle ocean
	pepper rocket saddle tiger umbrella valley wagon zebra anchor beetle cactus desert engine fountain`)

// composeMemory returns memory i of the benchmark, about words words long.
func composeMemory(i, words int) string {
	x := uint32(7919 * (i + 1))
	var b strings.Builder
	fmt.Fprintf(&b, "In the garden, note %d:", i+1)
	for range words {
		x = x*1664525 + 1013904223
		b.WriteString(" " + composeWords[int(x>>8)%len(composeWords)])
	}
	b.WriteString(".")
	return b.String()
}

// BenchmarkComposeTurn times one chat turn through the whole pipeline, A
// B A B in one run: (A) the turn prefilled (NoCache: nothing reused), (B)
// the same turn with its five retrieved memories composed from their
// chunks at a recompute fraction of 0.15 (Options.Compose), the tokens
// before them prefilled and the question after them too. The slots are
// emptied before each, so neither reuses the other's state. It prints each
// rep's TTFT (Usage.TTFT: the request's start to its first token,
// retrieval and composition included), the medians, their B/A and the
// median of each rep's B/A (A and B adjacent in time: less moved by a
// changing machine load); the target on the 1B shape is <= 0.4. The model is $MEMOSRT_BENCH_MODEL (the generated
// 1B shape: `make models/1b.gguf`), else stories260K;
// $MEMOSRT_BENCH_REPS reps (3), $MEMOSRT_BENCH_THREADS threads (2),
// $MEMOSRT_BENCH_WORDS words per memory (58: about 100 tokens of the
// llama vocabulary, 72 about 125; 20 on stories260K). As BenchmarkComposeTTFT (runtime), it needs ggml
// built with make's CGO_CFLAGS.
//
//	F="-O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
//	CGO_CFLAGS="$F" CGO_CXXFLAGS="$F" MEMOSRT_BENCH_MODEL=$PWD/models/1b.gguf go test -run '^$' -bench ComposeTurn -benchtime 1x -timeout 30m ./pipeline/
func BenchmarkComposeTurn(b *testing.B) {
	if miss := llama.MissingCPUFeatures(); len(miss) > 0 {
		b.Fatalf("ggml was compiled without %v (CGO_CFLAGS as make sets them: see the doc comment)", miss)
	}
	path, defWords := os.Getenv("MEMOSRT_BENCH_MODEL"), 58
	if path == "" {
		// stories260K's small vocabulary and 2048-token training context:
		// shorter memories, the mechanics only
		path, defWords = testmodels.Stories(b), 20
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	reps, threads, words := env("MEMOSRT_BENCH_REPS", 3), env("MEMOSRT_BENCH_THREADS", 2), env("MEMOSRT_BENCH_WORDS", defWords)
	ctx := context.Background()
	opts := Options{Dir: b.TempDir(), Model: path, NoSync: true, NoScheduler: true, Compose: 0.15,
		Engine: runtime.Options{NCtx: 4096, Threads: threads}, Parallel: 1, ResidentSeqs: -1, MinPersistTokens: 1}.WithDefaults()
	opts.Layout.MaxRetrievedTokens = 1600 // five memories (stories260K's vocabulary makes them ~315 tokens)
	if os.Getenv("MEMOSRT_BENCH_LOG") != "" {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p := newTest(b, opts)
	var lines []int
	for i := range 5 {
		m, _, err := p.cubes.Add(ctx, "b", textmem.Memory{Text: composeMemory(i, words)})
		if err != nil {
			b.Fatal(err)
		}
		l, done := p.hold()
		toks, err := l.lay.LineTokens(m)
		done()
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, len(toks))
	}
	if r, err := p.MakeChunks(ctx, "b", nil); err != nil || r.Made != 5 {
		b.Fatalf("chunks: %+v, %v", r, err)
	}
	forget := func() { p.eachLoaded(func(l *loaded) { l.pool.Forget("b", l.clearSeq) }) }
	turn := []Message{{Role: "user", Content: "What is in the garden?"}}
	chat := func(noCache bool) *Response {
		forget()
		out, err := p.Chat(ctx, Request{Cube: "b", Messages: turn, NumPredict: 1, NoCache: noCache, NoPersist: true, NoUsage: true})
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	ms := func(r *Response) float64 { return float64(r.Usage.TTFT.Microseconds()) / 1e3 }
	for range b.N {
		chat(true) // warm-up: first graphs, pages of the weights
		fmt.Printf("memory lines %v tokens; %d threads\n", lines, threads)
		fmt.Printf("%-4s %10s %10s %7s | %7s %7s %8s %10s\n", "rep", "A prefill", "B compose", "B/A", "prompt", "cached", "composed", "recomputed")
		var a, c []float64
		for i := range reps {
			ra, rb := chat(true), chat(false)
			if rb.Usage.ComposedTokens == 0 || ra.Usage.ComposedTokens != 0 || rb.Retrieved != 5 {
				b.Fatalf("rep %d: A composed %d, B composed %d of %d retrieved", i, ra.Usage.ComposedTokens, rb.Usage.ComposedTokens, rb.Retrieved)
			}
			a, c = append(a, ms(ra)), append(c, ms(rb))
			u := rb.Usage
			fmt.Printf("%-4d %10.1f %10.1f %7.3f | %7d %7d %8d %10d\n", i+1, ms(ra), ms(rb), ms(rb)/ms(ra), u.PromptTokens, u.CachedTokens, u.ComposedTokens, u.RecomputedTokens)
		}
		ma, mc := stats.Median(a), stats.Median(c)
		var ratios []float64
		for i := range a {
			ratios = append(ratios, c[i]/a[i])
		}
		fmt.Printf("median TTFT: A prefilled %.1f ms, B composed %.1f ms, B/A %.3f; median of the reps' B/A %.3f (target <= 0.4)\n",
			ma, mc, mc/ma, stats.Median(ratios))
		b.ReportMetric(ma, "prefill_ms")
		b.ReportMetric(mc, "compose_ms")
		b.ReportMetric(mc/ma, "compose/prefill")
	}
}
