package bench

import (
	"context"
	"os"
	"sort"
	"testing"

	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
)

func loadEngine(tb testing.TB, path string, nctx int) *runtime.Engine {
	tb.Helper()
	e, err := runtime.Load(context.Background(), runtime.Options{ModelPath: path, NCtx: nctx, NSeqMax: 2, Threads: 2})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// TestTTFTRuns checks the benchmark's mechanics on the tiny real model: one
// row per prefix, a blob that decodes, every time measured.
func TestTTFTRuns(t *testing.T) {
	e := loadEngine(t, testmodels.Stories(t), 1024)
	rows, err := TTFT(context.Background(), e, TTFTOptions{Prefixes: []int{64, 256}, Reps: 2, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Prefix != 64 || rows[1].Prefix != 256 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.Query != 16 || r.DiskFrom != "badger" || r.ColdMs <= 0 || r.WarmMs <= 0 || r.FloorMs <= 0 || r.WarmDiskMs <= 0 || r.StateBytes <= r.BlobBytes/2 {
			t.Fatalf("row %+v", r)
		}
		// each repetition in order, their median the row's figure
		if len(r.WarmDiskEachMs) != 2 || len(r.FloorEachMs) != 2 ||
			r.WarmDiskMs != stats.Median(r.WarmDiskEachMs) || r.FloorMs != stats.Median(r.FloorEachMs) {
			t.Fatalf("prefix %d: each %v (median %v), floors %v (median %v)", r.Prefix, r.WarmDiskEachMs, r.WarmDiskMs, r.FloorEachMs, r.FloorMs)
		}
	}
	if e.SeqLen(0) != 0 || e.SeqLen(1) != 0 {
		t.Fatal("sequences not cleared")
	}
}

// With TTFTOptions.Lossy the pack goes to Badger quantized (a version 2
// blob: 4 bits a value plus a minimum and a step per group, so more than
// 2x and under 4x smaller than the f16 state) and the from-Badger row
// restores it, dequantized, at every prefix length (TTFT fails otherwise).
func TestTTFTLossy(t *testing.T) {
	e := loadEngine(t, testmodels.Stories(t), 1024)
	q4 := kvcache.DefaultLossy
	rows, err := TTFT(context.Background(), e, TTFTOptions{Prefixes: []int{64, 256}, Reps: 1, Dir: t.TempDir(), Lossy: &q4})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.DiskFrom != "badger" || r.WarmDiskMs <= 0 || r.Compression <= 2 || r.Compression >= 4 {
			t.Fatalf("row %+v", r)
		}
	}
}

// BenchmarkTTFT reports cold, warm and floor TTFT and their ratios for a
// 1024-token prefix and a 16-token query. The model is $MEMOSRT_BENCH_MODEL
// (e.g. the generated 1B shape: `make bench-ttft`), else stories260K.
func BenchmarkTTFT(b *testing.B) {
	path := os.Getenv("MEMOSRT_BENCH_MODEL")
	if path == "" {
		path = testmodels.Stories(b)
	}
	e := loadEngine(b, path, 2048)
	for i := 0; i < b.N; i++ {
		rows, err := TTFT(context.Background(), e, TTFTOptions{Prefixes: []int{1024}, Reps: 5})
		if err != nil {
			b.Fatal(err)
		}
		r := rows[0]
		b.ReportMetric(r.ColdMs, "cold_ms")
		b.ReportMetric(r.WarmMs, "warm_ms")
		b.ReportMetric(r.FloorMs, "floor_ms")
		b.ReportMetric(r.ColdOverW, "cold/warm")
		b.ReportMetric(r.WarmOverF, "warm/floor")
	}
}

// TestTTFTColdReps: each cold run is reported in order and ColdMs is
// their median; a warm-up prefill adds no cold run.
func TestTTFTColdReps(t *testing.T) {
	e := loadEngine(t, testmodels.Stories(t), 512)
	for _, warm := range []bool{false, true} {
		rows, err := TTFT(context.Background(), e, TTFTOptions{Prefixes: []int{64}, Reps: 1, ColdReps: 3, WarmUp: warm})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || len(rows[0].ColdEachMs) != 3 {
			t.Fatalf("warm-up %v: rows %+v, want one row with 3 cold runs", warm, rows)
		}
		each := append([]float64(nil), rows[0].ColdEachMs...)
		sort.Float64s(each)
		if rows[0].ColdMs != each[1] {
			t.Fatalf("warm-up %v: cold %v ms, want the median of %v", warm, rows[0].ColdMs, rows[0].ColdEachMs)
		}
	}
}
