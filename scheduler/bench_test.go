package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// BenchmarkTTFTUnderJobs measures foreground TTFT (cold prefill of a cube's
// prompt, then the first token) with the engine idle and while background
// warm jobs (pack prefills at runtime.Request.Background priority, as Tiers
// jobs run them) keep it busy. Reports ttft_p50_ms and ttft_p90_ms.
//
//	go test -run '^$' -bench TTFTUnderJobs -benchtime 200x ./scheduler
func BenchmarkTTFTUnderJobs(b *testing.B) {
	ctx := context.Background()
	eng, err := runtime.Load(ctx, runtime.Options{ModelPath: testmodels.Stories(b), NCtx: 1024, NSeqMax: 2, Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	db, err := datadir.Open(datadir.Options{InMemory: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	mem, _ := textmem.Open(db, textmem.Options{})
	kv, _ := kvcache.Open(db, kvcache.Options{})
	for i := range 8 {
		mem.Add(ctx, "c", textmem.Memory{Text: fmt.Sprintf("Memory %d: Lily has a dog named Max who likes the park number %d.", i, i)})
	}
	l := layout.New(eng, mem, layout.Options{})
	mems, _ := mem.List(ctx, "c")
	_ = kv
	// a background job: ~600 tokens of pack prefill, repeated
	var job []int32
	for len(job) < 600 {
		t, _ := eng.Tokenize(" Once upon a time, there was a little girl named Lily who loved her dog Max.", len(job) == 0)
		job = append(job, t...)
	}
	for _, mode := range []string{"idle", "jobs"} {
		b.Run(mode, func(b *testing.B) {
			jctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var jobs atomic.Int64
			chunk := make(chan struct{}, 1)
			if mode == "jobs" {
				// one job at a time, as Tiers runs them, in JobChunk requests
				// (kvcache.Cache.Compute); chunk reports each finished chunk so
				// that every foreground request below arrives mid-job.
				wg.Add(1)
				go func() {
					defer wg.Done()
					for jctx.Err() == nil {
						for npast := 0; npast < len(job) && jctx.Err() == nil; npast += 16 {
							if _, err := eng.Generate(jctx, runtime.Request{Seq: 1, Tokens: job[:min(len(job), npast+16)], NPast: npast, PrefillOnly: true, Background: true}); err != nil {
								if jctx.Err() == nil {
									b.Error(err)
								}
								break
							}
							select {
							case chunk <- struct{}{}:
							default:
							}
						}
						jobs.Add(1)
					}
				}()
			}
			ttft := make([]float64, 0, b.N)
			b.ResetTimer()
			for range b.N {
				if mode == "jobs" {
					<-chunk // a job is running: its next chunk is being queued now
				}
				// a foreground request as the pipeline runs it: assemble, cold
				// prefill (no cached prefix), first token
				start := time.Now()
				end := eng.BeginForeground()
				p, err := l.Assemble(ctx, layout.Input{Cube: "c", Members: mems, Messages: []layout.Message{{Role: "user", Content: "What is the dog called?"}}})
				if err == nil {
					err = eng.ClearSeq(0)
				}
				var res runtime.Result
				if err == nil {
					res, err = eng.Generate(ctx, runtime.Request{Seq: 0, Tokens: p.Tokens, MaxTokens: 1, Start: start})
				}
				end()
				if err != nil {
					b.Fatal(err)
				}
				ttft = append(ttft, float64(res.TTFT.Microseconds())/1e3)
			}
			b.StopTimer()
			stop()
			wg.Wait()
			slices.Sort(ttft)
			b.ReportMetric(ttft[len(ttft)/2], "ttft_p50_ms")
			b.ReportMetric(ttft[len(ttft)*9/10], "ttft_p90_ms")
			b.ReportMetric(float64(jobs.Load()), "jobs_done") // whole 600-token packs
		})
	}
}
