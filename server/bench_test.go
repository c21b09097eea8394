package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
)

// Benchmarks (CLI-free):
//
//	go test -run '^$' -bench 'ParallelDecode|TTFT' -benchtime 1x ./server/
//
// They run on stories260K and, when present, on the generated 1B model
// (models/1b.gguf, `memosrt gen-model --preset 1b --out models/1b.gguf`;
// MEMOSRT_BENCH_1B overrides the path, MEMOSRT_BENCH_1B=off skips it).
// On a GPU: MEMOSRT_BENCH_NGL=-1 MEMOSRT_LIB_PATH=$PWD/lib/memosrt (after
// `make cuda`).

type benchModel struct {
	name, path string
	decode     int // tokens generated per stream
	decodeReps int // repetitions of each ParallelDecode measurement (median)
	ttftReps   int
	threads    int
	ngl        int
	libDir     string
}

func benchModels(b *testing.B) []benchModel {
	threads := goruntime.NumCPU()
	ngl, _ := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_NGL"))
	lib := os.Getenv("MEMOSRT_LIB_PATH")
	ms := []benchModel{{"stories260K", testmodels.Stories(b), 256, 9, 40, threads, ngl, lib}}
	p := os.Getenv("MEMOSRT_BENCH_1B")
	if p == "" {
		p = filepath.Join("..", "models", "1b.gguf")
	}
	if _, err := os.Stat(p); err == nil && p != "off" {
		decode, reps := 24, 7
		if ngl != 0 {
			decode, reps = 128, 40
		}
		ms = append(ms, benchModel{"1b", p, decode, 3, reps, threads, ngl, lib})
	}
	return ms
}

// genHTTP sends one greedy raw /api/generate and returns eval tokens.
func genHTTP(ctx context.Context, hc *http.Client, base, prompt string, n int) (int, error) {
	j, _ := json.Marshal(map[string]any{"model": testModel, "prompt": prompt, "raw": true, "stream": false, "options": greedyOpts(n)})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/api/generate", bytes.NewReader(j))
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var r struct {
		EvalCount int    `json:"eval_count"`
		Error     string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Error != "" {
		return 0, fmt.Errorf("%d %s %v", resp.StatusCode, r.Error, err)
	}
	return r.EvalCount, nil
}

var streamPrompts = []string{"Once upon a time", "Tom and Sue went to the park", "The little bird", "One day, a big dog"}

// aggregate runs streams concurrent generations and returns generated
// tokens per second of wall time, all streams together.
func aggregate(b *testing.B, streams int, gen func(i int) (int, error)) float64 {
	var wg sync.WaitGroup
	toks := make([]int, streams)
	errs := make([]error, streams)
	start := time.Now()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) { defer wg.Done(); toks[i], errs[i] = gen(i) }(i)
	}
	wg.Wait()
	d := time.Since(start)
	n := 0
	for i := range toks {
		if errs[i] != nil {
			b.Fatal(errs[i])
		}
		n += toks[i]
	}
	return float64(n) / d.Seconds()
}

// BenchmarkParallelDecode reports aggregate decode tokens/s with 1 and 4
// concurrent streams over HTTP (and in-process, for reference) and the
// speedup of 4 over 1.
func BenchmarkParallelDecode(b *testing.B) {
	for _, m := range benchModels(b) {
		b.Run(m.name, func(b *testing.B) {
			e := newEnv(b, envConfig{model: m.path, threads: m.threads, ngl: m.ngl, libDir: m.libDir, nseq: 4, nctx: 2048, mo: memosrt.Options{NoPersist: true}})
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
			ctx := context.Background()
			overHTTP := func(streams int) float64 {
				return aggregate(b, streams, func(i int) (int, error) {
					return genHTTP(ctx, hc, e.url(), streamPrompts[i], m.decode)
				})
			}
			inProc := func(streams int) float64 {
				return aggregate(b, streams, func(i int) (int, error) {
					toks, err := e.eng.Tokenize(streamPrompts[i], true)
					if err != nil {
						return 0, err
					}
					r, err := e.eng.Generate(ctx, runtime.Request{Seq: i, Tokens: toks, MaxTokens: m.decode})
					return r.EvalTokens, err
				})
			}
			overHTTP(1) // warm-up
			// interleaved repetitions, medians: a stories260K run lasts
			// ~0.1 s, so one hiccup of this shared machine would decide it
			var hs1, hs4, ps1, ps4 []float64
			for i := 0; i < b.N*m.decodeReps; i++ {
				hs1, hs4 = append(hs1, overHTTP(1)), append(hs4, overHTTP(4))
				ps1, ps4 = append(ps1, inProc(1)), append(ps4, inProc(4))
			}
			h1, h4, p1, p4 := stats.Median(hs1), stats.Median(hs4), stats.Median(ps1), stats.Median(ps4)
			b.ReportMetric(h1, "tok/s_1stream")
			b.ReportMetric(h4, "tok/s_4streams")
			b.ReportMetric(h4/h1, "speedup_http")
			b.ReportMetric(p4/p1, "speedup_inproc")
			b.Logf("%s: HTTP 1 stream %.1f tok/s, 4 streams %.1f tok/s (%.2fx); in-process %.1f → %.1f tok/s (%.2fx); medians of %d",
				m.name, h1, h4, h4/h1, p1, p4, p4/p1, len(hs1))
		})
	}
}

// BenchmarkTTFT compares time to first token over HTTP (client send to the
// first streamed chunk read) with in-process (Engine.Generate's TTFT), on
// prompts of about 64 tokens that share nothing cached.
func BenchmarkTTFT(b *testing.B) {
	for _, m := range benchModels(b) {
		b.Run(m.name, func(b *testing.B) {
			e := newEnv(b, envConfig{model: m.path, threads: m.threads, ngl: m.ngl, libDir: m.libDir, nseq: 1, nctx: 1024, mo: memosrt.Options{NoPersist: true}})
			ctx := context.Background()
			hc := &http.Client{Transport: &http.Transport{}}
			prompt := func(i int) string {
				return fmt.Sprintf("Story %d. %s", i, "Tom and Sue went to the park with their big red ball. They played all day in the sun and then sat under a tree to eat apples. Their mom called them home for dinner, and they ran back happy.")
			}
			inproc := func(i int) time.Duration {
				toks, _ := e.eng.Tokenize(prompt(i), true)
				e.eng.ClearSeq(0)
				r, err := e.eng.Generate(ctx, runtime.Request{Seq: 0, Tokens: toks, MaxTokens: 1})
				if err != nil {
					b.Fatal(err)
				}
				return r.TTFT
			}
			overHTTP := func(i int) time.Duration {
				j, _ := json.Marshal(map[string]any{"model": testModel, "prompt": prompt(i), "raw": true, "options": greedyOpts(2)})
				start := time.Now()
				resp, err := hc.Post(e.url()+"/api/generate", "application/json", bytes.NewReader(j))
				if err != nil {
					b.Fatal(err)
				}
				defer resp.Body.Close()
				sc := bufio.NewScanner(resp.Body)
				if !sc.Scan() {
					b.Fatal("no chunk")
				}
				d := time.Since(start)
				for sc.Scan() {
				}
				return d
			}
			overHTTP(-1)
			inproc(-1)
			var hs, ps []time.Duration
			for n := 0; n < b.N; n++ {
				for i := 0; i < m.ttftReps; i++ {
					ps = append(ps, inproc(1000*n+i))
					hs = append(hs, overHTTP(1000*n+i+500))
				}
			}
			h, p := stats.Median(hs), stats.Median(ps)
			b.ReportMetric(float64(h.Microseconds())/1e3, "ms_http_p50")
			b.ReportMetric(float64(p.Microseconds())/1e3, "ms_inproc_p50")
			b.ReportMetric(float64((h-p).Microseconds())/1e3, "ms_overhead_p50")
			b.Logf("%s: TTFT p50 over HTTP %v, in-process %v, overhead %v (%d reps)", m.name, h, p, h-p, len(hs))
		})
	}
}
