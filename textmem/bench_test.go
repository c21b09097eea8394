package textmem

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt/datadir"
)

// synthCorpus makes n deterministic memories of 8..24 words drawn from a
// Zipf(1.1) distribution over a 20000-word pseudo-vocabulary, and a query
// maker drawing 3..6 words from the same distribution.
type synthCorpus struct {
	vocab []string
	rng   *rand.Rand
	zipf  *rand.Zipf
}

func newSynthCorpus(seed uint64) *synthCorpus {
	rng := rand.New(rand.NewPCG(seed, 1))
	syl := []string{"ka", "lo", "mi", "ren", "tu", "sa", "vo", "ne", "pi", "dor", "an", "el", "ur", "ix", "bo", "que"}
	vocab := make([]string, 20000)
	for i := range vocab {
		var b strings.Builder
		for x := i + 1; x > 0; x /= len(syl) {
			b.WriteString(syl[x%len(syl)])
		}
		vocab[i] = b.String()
	}
	return &synthCorpus{vocab: vocab, rng: rng, zipf: rand.NewZipf(rng, 1.1, 2, uint64(len(vocab)-1))}
}

func (c *synthCorpus) words(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = c.vocab[c.zipf.Uint64()]
	}
	return strings.Join(w, " ")
}

func (c *synthCorpus) memory(i int) Memory {
	return Memory{
		Text:   c.words(8 + c.rng.IntN(17)),
		Kind:   "dialog",
		Source: "session-" + strconv.Itoa(i/20),
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// benchN is MEMOSRT_BENCH_N, or def when it is unset.
func benchN(b *testing.B, def int) int {
	v := os.Getenv("MEMOSRT_BENCH_N")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// heapStats is the runtime's memory statistics after two GCs.
func heapStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

func heapInUse() uint64 { return heapStats().HeapInuse }

// BenchmarkScale fills one cube with MEMOSRT_BENCH_N memories (default
// 100000) through Add, then runs 2000 Searches (DefaultQuery, k=10), and
// reports add and search latency percentiles in ms, the heap growth of the
// fill (heap-MiB: Store index plus Badger's memtables and caches) and the
// heap the Store's in-memory index holds (index-MiB: freed by Close). Badger runs on disk in b.TempDir() with NoSync (no fsync per
// commit; with fsync the add latency is the disk's flush time). Run with
//
//	go test ./textmem -run '^$' -bench Scale -benchtime 1x
//
// b.N is ignored past 1: the measurement is one fill.
func BenchmarkScale(b *testing.B) {
	n := benchN(b, 100000)
	ctx := context.Background()
	for range b.N {
		heap0 := heapInUse()
		db, err := datadir.Open(datadir.Options{Dir: b.TempDir(), NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		s, err := Open(db, Options{})
		if err != nil {
			b.Fatal(err)
		}
		c := newSynthCorpus(42)
		adds := make([]time.Duration, 0, n)
		start := time.Now()
		for i := range n {
			m := c.memory(i)
			t := time.Now()
			if _, err := s.Add(ctx, "big", m); err != nil {
				b.Fatal(err)
			}
			adds = append(adds, time.Since(t))
		}
		fill := time.Since(start)
		heap1 := heapInUse()
		searches := make([]time.Duration, 0, 2000)
		hits := 0
		for range 2000 {
			q := c.words(3 + c.rng.IntN(4))
			t := time.Now()
			h, err := s.Search(ctx, "big", q, 10)
			if err != nil {
				b.Fatal(err)
			}
			searches = append(searches, time.Since(t))
			hits += len(h)
		}
		// Reload the cube's index from Badger, as after a restart.
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		heap2 := heapInUse()
		b.ReportMetric(float64(int64(heap1)-int64(heap2))/(1<<20), "index-MiB")
		s, err = Open(db, Options{})
		if err != nil {
			b.Fatal(err)
		}
		t := time.Now()
		if _, err := s.Search(ctx, "big", "kalo", 10); err != nil {
			b.Fatal(err)
		}
		load := time.Since(t)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(percentile(adds, 0.5)), "add-p50-ms")
		b.ReportMetric(ms(percentile(adds, 0.95)), "add-p95-ms")
		b.ReportMetric(ms(percentile(adds[len(adds)*9/10:], 0.95)), "add-last10%-p95-ms")
		b.ReportMetric(ms(percentile(searches, 0.5)), "search-p50-ms")
		b.ReportMetric(ms(percentile(searches, 0.95)), "search-p95-ms")
		b.ReportMetric(ms(percentile(searches, 0.99)), "search-p99-ms")
		b.ReportMetric(float64(heap1-heap0)/(1<<20), "heap-MiB")
		b.ReportMetric(ms(load), "reload-ms")
		b.Logf("n=%d fill %v (%.0f adds/s) hits/search %.1f", n, fill.Round(time.Millisecond),
			float64(n)/fill.Seconds(), float64(hits)/2000)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := db.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIndexHeap builds one cube's in-memory index of MEMOSRT_BENCH_N
// synthetic memories (default 20000; the same corpus as BenchmarkScale,
// with their ids, kinds and sources) without a Backend, and reports the
// live heap it holds (live-MiB: heap allocated after a GC, before and
// after, as /metrics' go_gc_heap_live_bytes counts it) beside
// IndexStats' estimate of it (est-MiB), and both per memory. Run with
//
//	go test ./textmem -run '^$' -bench IndexHeap -benchtime 1x
func BenchmarkIndexHeap(b *testing.B) {
	n := benchN(b, 20000)
	type input struct {
		id    string
		meta  docMeta
		terms map[string]int
	}
	c := newSynthCorpus(42)
	in := make([]input, n)
	for i := range in {
		m := c.memory(i)
		tf, length := termFreqs(EnglishAnalyzer{}, m.Text)
		in[i] = input{formatID(uint64(1e18)+uint64(i), uint32(i)), docMeta{length: uint32(length), kind: m.Kind, source: m.Source}, tf}
	}
	for range b.N {
		live0 := heapLive()
		ix := newCubeIndex(nil)
		for _, d := range in {
			// copies, as a load from the Backend makes them
			meta := d.meta
			meta.kind, meta.source = strings.Clone(meta.kind), strings.Clone(meta.source)
			k := ix.addDoc(strings.Clone(d.id), meta)
			for t, tf := range d.terms {
				ix.addPosting(strings.Clone(t), k, tf)
			}
		}
		live := float64(heapLive() - live0)
		est := float64(ix.heapBytes())
		runtime.KeepAlive(in)
		runtime.KeepAlive(ix)
		b.ReportMetric(live/(1<<20), "live-MiB")
		b.ReportMetric(est/(1<<20), "est-MiB")
		b.ReportMetric(live/float64(n), "live-B/memory")
		b.ReportMetric(est/float64(n), "est-B/memory")
	}
}

// heapLive is the heap allocated after two GCs, bytes.
func heapLive() uint64 { return heapStats().HeapAlloc }
