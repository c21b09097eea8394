package pipeline

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/textmem"
)

// BenchmarkComposePack times the rebuild of a tier pack of five members
// as a background tier job computes it (kvcache.Compute at background
// priority in requests of TierOptions.JobChunk's default 16 tokens, the
// state then compressed and stored), A B A B in one run: (A) prefilled,
// (B) the members composed from their chunks at a recompute fraction of
// 0.15 (composePackAt, what TierOptions.Compose runs once the gate passed
// that fraction), the preamble prefilled. The pack is deleted after each,
// so neither reuses the other's. It prints each rep's time, the medians
// and their B/A. The model is $MEMOSRT_BENCH_MODEL (the generated 1B
// shape), else stories260K; $MEMOSRT_BENCH_REPS reps (3),
// $MEMOSRT_BENCH_THREADS threads (2), $MEMOSRT_BENCH_WORDS words per
// memory (58: about 100 tokens of the llama vocabulary; 20 on
// stories260K), as BenchmarkComposeTurn; $MEMOSRT_BENCH_JOBCHUNK tokens
// per background request (16; 0: each prefill in one request).
//
//	F="-O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
//	CGO_CFLAGS="$F" CGO_CXXFLAGS="$F" MEMOSRT_BENCH_MODEL=/path/1b.gguf go test -run '^$' -bench ComposePack -benchtime 1x -timeout 30m ./pipeline/
func BenchmarkComposePack(b *testing.B) {
	if miss := llama.MissingCPUFeatures(); len(miss) > 0 {
		b.Fatalf("ggml was compiled without %v (CGO_CFLAGS as make sets them: see the doc comment)", miss)
	}
	path, defWords := os.Getenv("MEMOSRT_BENCH_MODEL"), 58
	if path == "" {
		path, defWords = testmodels.Stories(b), 20
	}
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	reps, threads, words := env("MEMOSRT_BENCH_REPS", 3), env("MEMOSRT_BENCH_THREADS", 2), env("MEMOSRT_BENCH_WORDS", defWords)
	const ratio = 0.15
	jobChunk := env("MEMOSRT_BENCH_JOBCHUNK", 16)
	if os.Getenv("MEMOSRT_BENCH_JOBCHUNK") == "0" {
		jobChunk = 0 // one request per prefill, as a foreground computation
	}
	ctx := context.Background()
	opts := Options{Dir: b.TempDir(), Model: path, NoSync: true, NoScheduler: true, Compose: ratio,
		Engine: runtime.Options{NCtx: 4096, Threads: threads}, Parallel: 1, ResidentSeqs: -1, MinPersistTokens: 1}.WithDefaults()
	p := newTest(b, opts)
	for i := range 5 {
		if _, _, err := p.cubes.Add(ctx, "b", textmem.Memory{Text: composeMemory(i, words)}); err != nil {
			b.Fatal(err)
		}
	}
	if r, err := p.MakeChunks(ctx, "b", nil); err != nil || r.Made != 5 {
		b.Fatalf("chunks: %+v, %v", r, err)
	}
	mems, err := p.mem.List(ctx, "b")
	if err != nil {
		b.Fatal(err)
	}
	l, done := p.hold()
	defer done()
	pk, err := l.lay.Pack(ctx, "b", mems)
	if err != nil || len(pk.Pack) != 5 {
		b.Fatalf("pack: %d members, %v", len(pk.Pack), err)
	}
	var lines []int
	for _, m := range pk.Pack {
		toks, err := l.lay.LineTokens(m)
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, len(toks))
	}
	seq, err := l.eng.AcquireSeq(ctx) // the tier job's sequence
	if err != nil {
		b.Fatal(err)
	}
	defer l.eng.ReleaseSeq(seq)
	build := func(compose bool) (float64, *kvcache.Composition) {
		wo := kvcache.WarmOptions{Label: "b", Scope: "b", Background: true, Chunk: jobChunk}
		if compose {
			wo.Compose = func(ctx context.Context, seq, npast int) (*kvcache.Composition, int, error) {
				return p.composePackAt(ctx, l, ratio, "b", pk.Pack, pk.PackTokens, seq, npast)
			}
		}
		start := time.Now()
		info, _, err := p.kv.Compute(ctx, l.eng, seq, pk.PackTokens, wo)
		d := float64(time.Since(start).Microseconds()) / 1e3
		if err != nil {
			b.Fatal(err)
		}
		if (info.Composed != nil) != compose {
			b.Fatalf("composed %+v, want %v", info.Composed, compose)
		}
		if err := p.kv.Delete(info.ID); err != nil {
			b.Fatal(err)
		}
		l.eng.ClearSeq(seq)
		return d, info.Composed
	}
	for range b.N {
		build(false) // warm-up: first graphs, pages of the weights
		fmt.Printf("pack of %d tokens, member lines %v tokens; %d threads; background requests of %d tokens (0: one)\n", len(pk.PackTokens), lines, threads, jobChunk)
		fmt.Printf("%-4s %12s %12s %7s | %8s %10s\n", "rep", "A prefill", "B compose", "B/A", "composed", "recomputed")
		var a, c []float64
		for i := range reps {
			ma, _ := build(false)
			mc, comp := build(true)
			a, c = append(a, ma), append(c, mc)
			fmt.Printf("%-4d %12.1f %12.1f %7.3f | %8d %10d\n", i+1, ma, mc, mc/ma, comp.Tokens, comp.Recomputed)
		}
		ma, mc := stats.Median(a), stats.Median(c)
		fmt.Printf("median rebuild: A prefilled %.1f ms, B composed %.1f ms, B/A %.3f\n", ma, mc, mc/ma)
		b.ReportMetric(ma, "prefill_ms")
		b.ReportMetric(mc, "compose_ms")
		b.ReportMetric(mc/ma, "compose/prefill")
	}
}
