package runtime

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

// BenchmarkDecodeOverhead measures what the engine adds per decoded token
// on stories260K, one stream: the raw loop (llama_decode of one token per
// step on the engine's own context, as BenchmarkDecodeBatch in
// runtime/llama does, no sampling) against Engine.Generate of the same
// number of tokens from the same position, greedy and with Ollama's
// default sampler chain (top_k 40, top_p 0.9, temperature 0.8, repeat
// penalty 1.1 over 64), with text streamed to a callback as memosrt run
// does. The cases are interleaved run by run (the same machine state for
// each); it reports each one's median tokens/s and its ratio to the raw
// loop's. Default threads (runtime.Options), as `memosrt run`.
//
//	go test -run '^$' -bench DecodeOverhead -benchtime 9x ./runtime/
//
// MEMOSRT_BENCH_MODEL names another GGUF (the generated 1B shape),
// MEMOSRT_BENCH_STEPS another token count, MEMOSRT_BENCH_THREADS a thread
// count other than the default, and MEMOSRT_BENCH_QUICK=1 keeps
// the raw loop and the streamed greedy case only (bench/contention.sh).
func BenchmarkDecodeOverhead(b *testing.B) {
	steps := 256
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_STEPS")); err == nil && v > 1 {
		steps = v
	}
	path := testmodels.Stories(b)
	if p := os.Getenv("MEMOSRT_BENCH_MODEL"); p != "" {
		path = p
	}
	threads, _ := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_THREADS")) // 0: the default
	e, err := Load(context.Background(), Options{ModelPath: path, NCtx: 2048, NSeqMax: 4, Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt, err := e.Tokenize("Once upon a time", true)
	if err != nil {
		b.Fatal(err)
	}
	raw := func() float64 {
		e.mu.Lock()
		defer e.mu.Unlock()
		// llama.cpp's default: every thread (the engine's tuner sets its
		// own count again at its next step)
		e.ctx.SetThreads(e.opts.Threads, e.opts.Threads)
		e.threads = e.opts.Threads
		e.ctx.SeqRemove(0, 0, -1)
		batch := llama.NewBatch(len(prompt))
		defer batch.Close()
		for i, t := range prompt {
			batch.Add(t, i, 0, i == len(prompt)-1)
		}
		if err := e.ctx.Decode(batch); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for step := range steps {
			batch.Clear()
			batch.Add(Token(100+step%50), len(prompt)+step, 0, true)
			if err := e.ctx.Decode(batch); err != nil {
				b.Fatal(err)
			}
		}
		return float64(steps) / time.Since(start).Seconds()
	}
	gen := func(sp llama.SamplerParams, stream bool) float64 {
		if err := e.ClearSeq(0); err != nil {
			b.Fatal(err)
		}
		req := Request{Seq: 0, Tokens: prompt, MaxTokens: steps, Sampling: sp}
		var n int
		if stream {
			req.OnText = func(s string) error { n += len(s); return nil }
		}
		res, err := e.Generate(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		if res.EvalTokens != steps {
			b.Fatalf("%d tokens, want %d (%s)", res.EvalTokens, steps, res.DoneReason)
		}
		// the first token comes with the prompt: the rest is decode
		return float64(steps-1) / res.EvalTime.Seconds()
	}
	ollama := llama.SamplerParams{Temperature: 0.8, TopK: 40, TopP: 0.9, RepeatPenalty: 1.1, RepeatLastN: 64, Seed: 1}
	cases := []struct {
		name string
		run  func() float64
	}{
		{"raw", raw},
		{"greedy", func() float64 { return gen(llama.SamplerParams{}, false) }},
		{"greedy_stream", func() float64 { return gen(llama.SamplerParams{}, true) }},
		{"ollama_stream", func() float64 { return gen(ollama, true) }},
	}
	if os.Getenv("MEMOSRT_BENCH_QUICK") != "" {
		cases = []struct {
			name string
			run  func() float64
		}{cases[0], cases[2]}
	}
	for _, c := range cases {
		if w := c.run(); testing.Verbose() { // warm-up
			fmt.Printf("%s warm-up: %.0f\n", c.name, w)
		}
	}
	got := make([][]float64, len(cases))
	b.ResetTimer()
	for range b.N {
		for i, c := range cases {
			got[i] = append(got[i], c.run())
		}
	}
	b.StopTimer()
	r := stats.Median(slices.Clone(got[0]))
	b.ReportMetric(r, "raw_tok/s")
	for i, c := range cases[1:] {
		m := stats.Median(slices.Clone(got[i+1]))
		b.ReportMetric(m, c.name+"_tok/s")
		b.ReportMetric(m/r, c.name+"_vs_raw")
	}
	if testing.Verbose() {
		for i, c := range cases {
			fmt.Printf("%s: %v\n", c.name, got[i])
		}
	}
}
