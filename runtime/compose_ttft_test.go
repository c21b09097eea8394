package runtime_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
)

// composeTTFTShape is the request of issue 15's TTFT point: nChunks
// memories of chunkLen tokens each after a BOS preamble, then a query.
type composeTTFTShape struct {
	nChunks, chunkLen, query, reps int
	scratch                        int // ComposeSeq's scratch sequences (2, 3, ...): runs per recompute decode
}

// composeTTFTRep is one A B pair of composeTTFT, milliseconds.
type composeTTFTRep struct {
	fullMs, composeMs                         float64 // A and B, each to the first sampled token
	blobMs, restoreMs, probeMs, redoMs, qryMs float64 // B's phases
	res                                       runtime.ComposeResult
}

// composeTTFT times, rep by rep and alternating, (A) a full prefill of
// BOS + the chunks' tokens + the query to the first sampled token, and
// (B) the same prompt composed: every chunk's blob (kvcache.Encode of its
// PrefillChunk state, made beforehand, as the KV tier stores states) is
// decoded and checked, ComposeSeq restores them after the preamble,
// K-shifts the moved ones and recomputes the share o selects, and
// Generate decodes the query to its first sampled token. The blobs come
// from memory: runtime cannot reach kvcache's Badger store, and the read
// from Badger is timed on its own by `memosrt bench ttft`. Token ids are
// drawn from a fixed LCG over the vocabulary (the weights are random for
// the 1B shape: time only). Uses seqs 0, 1 and sh.scratch (at least 1)
// more.
func composeTTFT(tb testing.TB, e *runtime.Engine, sh composeTTFTShape, o runtime.ComposeOptions, out io.Writer) []composeTTFTRep {
	tb.Helper()
	ctx := context.Background()
	nv := e.Shape().NVocab
	x := uint32(12345)
	next := func() runtime.Token {
		x = x*1664525 + 1013904223
		return runtime.Token(100 + int(x>>8)%(nv-100))
	}
	pre, err := e.PrefillPreamble(ctx, 0, []runtime.Token{e.BOS()})
	if err != nil {
		tb.Fatal(err)
	}
	kv := e.KVConfig()
	blob := func(toks []runtime.Token, st []byte) []byte {
		b, err := kvcache.Encode(kvcache.Header{KV: kv, Tokens: toks, Created: time.Now()}, st)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	preBlob := blob(pre.Tokens, pre.State)
	full := slices.Clone(pre.Tokens)
	var chunkToks [][]runtime.Token
	var blobs [][]byte
	var stateBytes, blobBytes int
	for range sh.nChunks {
		toks := make([]runtime.Token, sh.chunkLen)
		for i := range toks {
			toks[i] = next()
		}
		c, err := e.PrefillChunk(ctx, 0, pre, toks)
		if err != nil {
			tb.Fatal(err)
		}
		chunkToks = append(chunkToks, toks)
		blobs = append(blobs, blob(toks, c.State))
		stateBytes += len(c.State)
		blobBytes += len(blobs[len(blobs)-1])
		full = append(full, toks...)
	}
	n := len(full)
	for range sh.query {
		full = append(full, next())
	}
	fmt.Fprintf(out, "compose TTFT: %d chunks x %d tokens after %d preamble token(s), %d-token query (%d prompt tokens), %d threads; chunk states %.1f MiB, blobs %.1f MiB\n",
		sh.nChunks, sh.chunkLen, len(pre.Tokens), sh.query, len(full), e.Options().Threads, float64(stateBytes)/(1<<20), float64(blobBytes)/(1<<20))
	cfg := kvcache.ConfigKey(kv, "")
	var scratch []int
	for i := range max(sh.scratch, 1) {
		scratch = append(scratch, 2+i)
	}

	// B's restore: decode and check the blobs as kvcache does
	unpack := func(b []byte, want []runtime.Token) []byte {
		h, st, err := kvcache.Decode(b)
		if err != nil {
			tb.Fatal(err)
		}
		if kvcache.ConfigKey(h.KV, "") != cfg || !slices.Equal(h.Tokens, want) {
			tb.Fatalf("blob of another config or tokens")
		}
		return st
	}
	fullRun := func() float64 {
		if err := e.ClearSeq(0); err != nil {
			tb.Fatal(err)
		}
		start := time.Now()
		r, err := e.Generate(ctx, runtime.Request{Seq: 0, Tokens: full, MaxTokens: 1, Start: start})
		if err != nil {
			tb.Fatal(err)
		}
		e.ClearSeq(0)
		return ms(r.TTFT)
	}
	composeRun := func() composeTTFTRep {
		var rep composeTTFTRep
		start := time.Now()
		p := runtime.Preamble{Tokens: pre.Tokens, State: unpack(preBlob, pre.Tokens)}
		chunks := make([]runtime.Chunk, len(blobs))
		for i, b := range blobs {
			chunks[i] = runtime.Chunk{Tokens: chunkToks[i], Pos0: len(pre.Tokens), State: unpack(b, chunkToks[i])}
		}
		rep.blobMs = ms(time.Since(start))
		res, err := e.ComposeSeq(ctx, 1, scratch, p, chunks, o)
		if err != nil {
			tb.Fatal(err)
		}
		if !slices.Equal(res.Tokens, full[:n]) {
			tb.Fatal("composed tokens differ from the full prompt")
		}
		t := time.Now()
		r, err := e.Generate(ctx, runtime.Request{Seq: 1, Tokens: full, NPast: n, MaxTokens: 1, Start: start})
		if err != nil {
			tb.Fatal(err)
		}
		e.ClearSeq(1)
		rep.composeMs, rep.qryMs = ms(r.TTFT), ms(time.Since(t))
		rep.restoreMs, rep.probeMs, rep.redoMs = ms(res.RestoreTime), ms(res.ProbeTime), ms(res.RecomputeTime)
		rep.res = res
		return rep
	}

	fmt.Fprintf(out, "%-4s %10s %10s %7s | %8s %8s %8s %9s %8s %9s %8s\n", "rep", "A full ms", "B comp ms", "B/A", "blobs ms", "restore", "probe", "recompute", "decodes", "query ms", "redo")
	var reps []composeTTFTRep
	for i := range sh.reps {
		a := fullRun()
		rep := composeRun()
		rep.fullMs = a
		reps = append(reps, rep)
		fmt.Fprintf(out, "%-4d %10.1f %10.1f %7.3f | %8.1f %8.1f %8.1f %9.1f %8d %9.1f %7.1f%%\n", i+1, a, rep.composeMs, rep.composeMs/a,
			rep.blobMs, rep.restoreMs, rep.probeMs, rep.redoMs, rep.res.RecomputeDecodes, rep.qryMs, 100*rep.res.Fraction())
	}
	med := func(f func(composeTTFTRep) float64) float64 {
		var v []float64
		for _, r := range reps {
			v = append(v, f(r))
		}
		return stats.Median(v)
	}
	a, b := med(func(r composeTTFTRep) float64 { return r.fullMs }), med(func(r composeTTFTRep) float64 { return r.composeMs })
	r0 := reps[0].res
	fmt.Fprintf(out, "median: A full %.1f ms, B composed %.1f ms, B/A %.3f (target <= 0.3); recomputed %d of %d chunk tokens (%.1f%%; Ratio %.2f, Gap %d, %d scratch) in %d decodes, %d probed, %d moved\n",
		a, b, b/a, r0.Recomputed, r0.ChunkTokens, 100*r0.Fraction(), o.Ratio, o.Gap, len(scratch), r0.RecomputeDecodes, r0.Probed, r0.Moved)
	fmt.Fprintf(out, "median phases of B ms: blobs %.1f, restore+shift %.1f, probe %.1f, recompute %.1f, query %.1f\n",
		med(func(r composeTTFTRep) float64 { return r.blobMs }), med(func(r composeTTFTRep) float64 { return r.restoreMs }),
		med(func(r composeTTFTRep) float64 { return r.probeMs }), med(func(r composeTTFTRep) float64 { return r.redoMs }),
		med(func(r composeTTFTRep) float64 { return r.qryMs }))
	return reps
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkComposeTTFT prints issue 15's composition TTFT point: 8 chunks
// of 128 tokens plus a 16-token query, full prefill (A) against
// composition from the chunks' stored blobs (B) at the default recompute
// ratio (the one BenchmarkComposeQuality measures), A B A B in one run,
// per-rep times with B's phases, medians and B/A. Target: B/A <= 0.3.
// The model is $MEMOSRT_BENCH_MODEL (the generated 1B shape: `make
// models/1b.gguf`), else stories260K; $MEMOSRT_BENCH_REPS reps (3),
// $MEMOSRT_BENCH_THREADS threads (2), $MEMOSRT_BENCH_GAP another
// ComposeOptions.Gap (-1: no merging of recomputed runs),
// $MEMOSRT_BENCH_SCRATCH scratch sequences (32: the recomputed runs share
// one llama_decode; 1: one decode per run, the earlier path),
// $MEMOSRT_BENCH_PROBE another ComposeOptions.ProbeLayer. It needs ggml
// built for this CPU, as make builds it: go test's own CGO_CFLAGS (-O2 -g,
// no -march) give baseline x86-64 kernels, tens of times slower (256
// tokens of the 1B shape on one thread: 380 s instead of 5.4 s), so it
// fails on such a build (llama.MissingCPUFeatures). The flags change the
// build cache key: the first run recompiles llama.cpp (minutes).
//
//	F="-O3 -march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
//	CGO_CFLAGS="$F" CGO_CXXFLAGS="$F" MEMOSRT_BENCH_MODEL=$PWD/models/1b.gguf go test -run '^$' -bench ComposeTTFT -benchtime 1x -timeout 30m ./runtime/
func BenchmarkComposeTTFT(b *testing.B) {
	if miss := llama.MissingCPUFeatures(); len(miss) > 0 {
		b.Fatalf("ggml was compiled without %v, which this CPU has (CGO_CFLAGS without -march; go test's default is -O2 -g), so prefill runs baseline x86-64 code, tens of times slower: set CGO_CFLAGS and CGO_CXXFLAGS as make does (doc comment)", miss)
	}
	path := os.Getenv("MEMOSRT_BENCH_MODEL")
	if path == "" {
		path = testmodels.Stories(b)
	}
	reps, threads := 3, 2
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_REPS")); err == nil && v > 0 {
		reps = v
	}
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	scratch := 32
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_SCRATCH")); err == nil && v > 0 {
		scratch = v
	}
	e, err := runtime.Load(context.Background(), runtime.Options{ModelPath: path, NCtx: 2048, NSeqMax: 2 + scratch, Threads: threads, BlendProbe: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	o := runtime.DefaultComposeOptions()
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_GAP")); err == nil {
		o.Gap = v
	}
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_PROBE")); err == nil && v > 0 {
		o.ProbeLayer = v
	}
	for range b.N {
		r := composeTTFT(b, e, composeTTFTShape{nChunks: 8, chunkLen: 128, query: 16, reps: reps, scratch: scratch}, o, os.Stdout)
		var a, c []float64
		for _, x := range r {
			a, c = append(a, x.fullMs), append(c, x.composeMs)
		}
		b.ReportMetric(stats.Median(a), "full_ms")
		b.ReportMetric(stats.Median(c), "compose_ms")
		b.ReportMetric(stats.Median(c)/stats.Median(a), "compose/full")
		b.ReportMetric(100*r[0].res.Fraction(), "recomputed_%")
	}
}

// TestComposeTTFTRuns checks composeTTFT's mechanics on stories260K with
// small chunks: every rep timed, the composition as long as the prompt,
// the default share recomputed, the sequences left empty.
func TestComposeTTFTRuns(t *testing.T) {
	e, err := runtime.Load(context.Background(), runtime.Options{ModelPath: testmodels.Stories(t), NCtx: 512, NSeqMax: 4, Threads: 1, BlendProbe: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var sink io.Writer = io.Discard
	if testing.Verbose() {
		sink = os.Stdout
	}
	reps := composeTTFT(t, e, composeTTFTShape{nChunks: 4, chunkLen: 20, query: 4, reps: 2, scratch: 2}, runtime.DefaultComposeOptions(), sink)
	for _, r := range reps {
		if r.fullMs <= 0 || r.composeMs <= 0 || r.res.ChunkTokens != 80 || r.res.Moved != 60 || r.res.Recomputed != 12 || len(r.res.Tokens) != 81 {
			t.Fatalf("rep %+v", r)
		}
	}
	if e.SeqLen(0) != 0 || e.SeqLen(1) != 0 || e.SeqLen(2) != 0 || e.SeqLen(3) != 0 {
		t.Fatal("sequences not cleared")
	}
}
