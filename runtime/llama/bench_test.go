package llama

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
)

// BenchmarkDecodeBatch measures llama.cpp's own ceiling for batched decode,
// with nothing of memosrt's runtime in the way: one llama_decode per step
// carrying one token of each of `seqs` sequences (no sampling; fixed token
// ids), 256 steps after a 5-token prompt per sequence, flash attention on,
// unified KV cache as the engine uses it. It reports tokens/s for 1 and 4
// sequences per step (medians of 9 interleaved runs on stories260K) and
// their ratio, the figure the server's
// BenchmarkParallelDecode (4 streams vs 1) cannot exceed by much.
//
//	go test -run '^$' -bench DecodeBatch -benchtime 1x ./runtime/llama/
//
// The generated 1B shape is included when ../../models/1b.gguf exists
// (32 steps there). Weights are read into memory as the engine does by
// default; MEMOSRT_BENCH_MMAP=1 maps the file instead (runtime.Options.Mmap).
func BenchmarkDecodeBatch(b *testing.B) {
	type model struct {
		name, path string
		steps      int
		reps       int // interleaved repetitions, medians reported
	}
	ms := []model{{"stories260K", testmodels.Stories(b), 256, 9}}
	if p := filepath.Join("..", "..", "models", "1b.gguf"); fileExists(p) {
		ms = append(ms, model{"1b", p, 32, 1})
	}
	// bench/contention.sh: fewer repetitions under load
	if v, err := strconv.Atoi(os.Getenv("MEMOSRT_BENCH_REPS")); err == nil && v > 0 {
		for i := range ms {
			ms[i].reps = v
		}
	}
	Init("")
	for _, mm := range ms {
		for _, threads := range []int{1, goruntime.NumCPU()} {
			b.Run(fmt.Sprintf("%s/threads=%d", mm.name, threads), func(b *testing.B) {
				m, err := LoadModel(mm.path, ModelParams{UseMmap: os.Getenv("MEMOSRT_BENCH_MMAP") != ""})
				if err != nil {
					b.Fatal(err)
				}
				defer m.Close()
				c, err := NewContext(m, ContextParams{NCtx: 2048, NSeqMax: 4, Threads: threads,
					TypeK: TypeF16, TypeV: TypeF16, FlashAttn: FlashAttnEnabled, KVUnified: true})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				batch := NewBatch(32)
				defer batch.Close()
				run := func(seqs int) float64 {
					c.ClearMemory()
					batch.Clear()
					for s := 0; s < seqs; s++ {
						for p := 0; p < 5; p++ {
							batch.Add(Token(1+p+s), p, s, p == 4)
						}
					}
					if err := c.Decode(batch); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					for step := 0; step < mm.steps; step++ {
						batch.Clear()
						for s := 0; s < seqs; s++ {
							batch.Add(Token(100+step%50+s), 5+step, s, true)
						}
						if err := c.Decode(batch); err != nil {
							b.Fatal(err)
						}
					}
					return float64(mm.steps*seqs) / time.Since(start).Seconds()
				}
				run(1) // warm-up
				var r1, r4 []float64
				for i := 0; i < b.N*mm.reps; i++ {
					r1, r4 = append(r1, run(1)), append(r4, run(4))
				}
				t1, t4 := stats.Median(r1), stats.Median(r4)
				b.ReportMetric(t1, "tok/s_1seq")
				b.ReportMetric(t4, "tok/s_4seq")
				b.ReportMetric(t4/t1, "speedup")
			})
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
