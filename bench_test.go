package memosrt

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/runtime"
)

// BenchmarkPipelineOverhead measures what the one request pipeline adds
// to the bare engine per request on stories260K: the same prompt, greedy,
// 8 tokens, once through OS.Generate (checks, prompt assembly, adapters,
// slot and KV admission, KV-source choice, usage) and once straight through
// runtime.Engine.Generate on a cleared sequence (tokenize, decode), the two
// interleaved request by request so that both see the same machine. The
// "cube" case adds a cube of three memories with its pack resident: the
// pipeline shares the pack in (resident level), the bare engine is handed
// the pack's cells as a precomputed prefix (CopySeq), so both decode the
// same suffix. Reports the p50 of each and overhead_p50_ms = their
// difference.
//
//	go test -run '^$' -bench PipelineOverhead -benchtime 200x .
func BenchmarkPipelineOverhead(b *testing.B) {
	ctx := context.Background()
	opts := testOptions(b, b.TempDir())
	opts.Parallel = 1
	opts.NoPersist = true
	o := openOS(b, opts)
	eng := o.Engine()
	addMemories(b, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.", "Lily's favourite food is apple pie.")
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
			o.prim().resMu.Lock()
			var res *residentPack
			if p, ok := o.prim().res[cube]; ok {
				res = p
			}
			o.prim().resMu.Unlock()
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
					npast = len(res.toks)
					err = eng.CopySeq(res.seq, seq, 0, npast)
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
				o.prim().pool.hold(o.prim().pool.all[0], nil)
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
