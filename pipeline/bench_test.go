package pipeline

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/textmem"
)

// BenchmarkPipelineOverhead measures what the one request pipeline adds
// to the bare engine per request on stories260K: the same prompt, greedy,
// 8 tokens, once through Pipeline.Generate (checks, prompt assembly, adapters,
// slot and KV admission, KV-source choice, usage) and once straight through
// runtime.Engine.Generate on a cleared sequence (tokenize, decode), the two
// interleaved request by request so that both see the same machine. The
// "cube" case adds a cube of three memories with its pack resident: the
// pipeline shares the pack in (resident level), the bare engine is handed
// the pack's cells as a precomputed prefix (CopySeq), so both decode the
// same suffix. Reports the p50 of each and overhead_p50_ms = their
// difference.
//
//	go test -run '^$' -bench PipelineOverhead -benchtime 200x ./pipeline/
func BenchmarkPipelineOverhead(b *testing.B) {
	ctx := context.Background()
	opts := testOptions(b)
	opts.Parallel = 1
	opts.NoPersist = true
	o := newTest(b, opts)
	eng := o.Engine()
	for _, text := range []string{"Lily has a dog named Max.", "Max likes to run in the park.", "Lily's favourite food is apple pie."} {
		if _, _, err := o.cubes.Add(ctx, "c", textmem.Memory{Text: text}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := o.Warm(ctx, "c", WarmOptions{Resident: true}); err != nil {
		b.Fatal(err)
	}
	seq := o.prim().seqs[0] // the pool's only slot, used directly between pipeline requests
	for _, cube := range []string{"", "c"} {
		name := "plain"
		if cube != "" {
			name = "cube"
		}
		b.Run(name, func(b *testing.B) {
			req := Request{Cube: cube, Prompt: "Once upon a time", NumPredict: 8, NoUsage: true}
			r, err := o.render(ctx, o.prim(), &req)
			if err != nil {
				b.Fatal(err)
			}
			var res *slots.ResidentPack
			if p, ok := o.prim().res.Get(cube); ok {
				res = &p
			}
			bare := func() time.Duration {
				start := time.Now()
				toks, err := eng.Tokenize(r.text, true)
				if err == nil && cube != "" {
					toks = r.toks // the layout tokenizes head and rest apart
				}
				npast := 0
				if err == nil {
					err = eng.ClearSeq(seq)
				}
				if err == nil && res != nil {
					npast = len(res.Toks)
					err = eng.CopySeq(res.Seq, seq, 0, npast)
				}
				if err == nil {
					_, err = eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks, NPast: npast, MaxTokens: 8, Start: start})
				}
				if err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			pipe := func() time.Duration {
				start := time.Now()
				// a cold slot each time, as the bare side has
				eng.ClearSeq(seq)
				o.prim().pool.Hold(o.prim().pool.All()[0], nil)
				got, err := o.Generate(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if cube != "" && got.CacheSource != SourceResident {
					b.Fatalf("cache source %q, want the resident pack", got.CacheSource)
				}
				return time.Since(start)
			}
			var tb, tp []float64
			b.ResetTimer()
			for range b.N {
				tb = append(tb, float64(bare().Microseconds())/1e3)
				tp = append(tp, float64(pipe().Microseconds())/1e3)
			}
			b.StopTimer()
			mb, mp := stats.Median(slices.Clone(tb)), stats.Median(slices.Clone(tp))
			b.ReportMetric(mb, "engine_p50_ms")
			b.ReportMetric(mp, "pipeline_p50_ms")
			b.ReportMetric(mp-mb, "overhead_p50_ms")
		})
	}
}

// BenchmarkRunDecode measures decode tokens/s of one stream of 256 tokens
// through Pipeline.Generate (what `memosrt run` calls: the pipeline, a slot, the
// engine's batch loop) against runtime.Engine.Generate on the same engine,
// interleaved run by run; runtime's BenchmarkDecodeOverhead relates the
// engine to the raw llama_decode loop. Options as `memosrt run` opens the
// OS (default threads, n_ctx 2048, 4 slots, 2 resident sequences).
//
//	go test -run '^$' -bench RunDecode -benchtime 9x ./pipeline/
func BenchmarkRunDecode(b *testing.B) {
	const steps = 256
	ctx := context.Background()
	opts := testOptions(b)
	opts.Engine = runtime.Options{NCtx: 2048}
	opts.Parallel, opts.ResidentSeqs = 4, 2
	o := newTest(b, opts)
	eng := o.Engine()
	prompt := "Once upon a time"
	toks, err := eng.Tokenize(prompt, true)
	if err != nil {
		b.Fatal(err)
	}
	seq := o.prim().seqs[0]
	bare := func() float64 {
		eng.ClearSeq(seq)
		r, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks, MaxTokens: steps})
		if err != nil || r.EvalTokens != steps {
			b.Fatalf("%d tokens: %v", r.EvalTokens, err)
		}
		return float64(steps-1) / r.EvalTime.Seconds()
	}
	pipe := func(stream bool) float64 {
		req := Request{Prompt: prompt, Raw: true, NumPredict: steps, NoCache: true, NoUsage: true}
		if stream {
			req.OnText = func(string) error { return nil }
		}
		r, err := o.Generate(ctx, req)
		if err != nil || r.Usage.EvalTokens != steps {
			b.Fatalf("%v", err)
		}
		return float64(steps-1) / r.Usage.EvalDuration.Seconds()
	}
	bare()
	pipe(false)
	pipe(true)
	var tb, tp, ts []float64
	b.ResetTimer()
	for range b.N {
		tb, tp, ts = append(tb, bare()), append(tp, pipe(false)), append(ts, pipe(true))
	}
	b.StopTimer()
	mb, mp, ms := stats.Median(slices.Clone(tb)), stats.Median(slices.Clone(tp)), stats.Median(slices.Clone(ts))
	b.ReportMetric(mb, "engine_tok/s")
	b.ReportMetric(mp, "pipeline_tok/s")
	b.ReportMetric(mp/mb, "pipeline_vs_engine")
	b.ReportMetric(ms, "streamed_tok/s")
	b.ReportMetric(ms/mb, "streamed_vs_engine")
}

// testOptions are the tests' options: stories260K, 1,024 cells, 2
// threads, 2 slots, no background loop.
func testOptions(t testing.TB) Options {
	return Options{Dir: t.TempDir(), Model: testmodels.Stories(t), NoSync: true, NoScheduler: true,
		Engine: runtime.Options{NCtx: 1024, Threads: 2}, Parallel: 2, MinPersistTokens: 1}.WithDefaults()
}

// newTest builds a pipeline over fresh stores in opts.Dir, closed at the
// end of the test.
func newTest(t testing.TB, opts Options) *Pipeline { return newTestWith(t, opts, nil) }

// newTestWith is newTest with onChat as the Deps.OnChat hook.
func newTestWith(t testing.TB, opts Options, onChat func(context.Context, *Request, textmem.Cube, string)) *Pipeline {
	t.Helper()
	ctx := context.Background()
	db := testenv.DB(t, opts.Dir)
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mem.Close() })
	kv, err := kvcache.Open(db, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	reg, err := lora.NewRegistry(db, lora.RegistryOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cubes, err := textmem.OpenCubes(ctx, mem, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, ctx, opts, Deps{DB: db, Mem: mem, KV: kv, Reg: reg, Cubes: cubes, OnChat: onChat})
	if err != nil {
		t.Fatal(err)
	}
	p.Start(ctx)
	t.Cleanup(func() {
		p.Drain()()
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// prim is the primary's loaded state (tests reach below the pipeline).
func (p *Pipeline) prim() *loaded {
	l, done := p.hold()
	done()
	return l
}
