package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/stats"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/kvcache"
	kvredis "github.com/memosrt/memosrt/kvcache/redis"
	"github.com/memosrt/memosrt/runtime"
)

func openCache(tb testing.TB, shared kvcache.Shared) *kvcache.Cache {
	tb.Helper()
	db, err := datadir.Open(datadir.Options{Dir: tb.TempDir(), NoSync: true})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := kvcache.Open(db, kvcache.Options{Shared: shared, SharedTimeout: time.Minute})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(); db.Close() })
	return c
}

// BenchmarkSharedTTFT is issue 16's side-by-side: warm TTFT of a node that
// restores a 1024-token pack from the shared Redis (a real redis-server on
// loopback) against one restoring it from its own Badger, both with their
// RAM caches dropped before every restore, next to cold prefill and the
// floor, interleaved run by run on one engine (medians). The model is
// $MEMOSRT_BENCH_MODEL (`make bench-shared`: the generated 1B shape), else
// stories260K.
func BenchmarkSharedTTFT(b *testing.B) {
	path := os.Getenv("MEMOSRT_BENCH_MODEL")
	if path == "" {
		path = testmodels.Stories(b)
	}
	srv := testutil.StartRedis(b, 0)
	ctx := context.Background()
	e := loadEngine(b, path, 2048)
	prefix, err := Tokens(e, 1024, true)
	if err != nil {
		b.Fatal(err)
	}
	query, err := Tokens(e, 17, false)
	if err != nil {
		b.Fatal(err)
	}
	all := append(append([]int32{}, prefix...), query[1:]...)
	redisFor := func() *kvredis.Store {
		r, err := kvredis.Open(ctx, srv.URL(), kvredis.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		return r
	}
	local := openCache(b, nil)         // the pack in this node's Badger
	writer := openCache(b, redisFor()) // node A: computed it, wrote it to Redis
	reader := openCache(b, redisFor()) // node B: has only Redis
	gen := func(npast int, start time.Time) float64 {
		r, err := e.Generate(ctx, runtime.Request{Seq: 0, Tokens: all, NPast: npast, MaxTokens: 1, Start: start})
		if err != nil {
			b.Fatal(err)
		}
		return ms(r.TTFT)
	}
	e.ClearSeq(0)
	cold := gen(0, time.Time{})
	if err := e.ClearSeq(0); err != nil {
		b.Fatal(err)
	}
	if err := e.Prefill(ctx, 0, prefix, 0); err != nil {
		b.Fatal(err)
	}
	state, err := e.SaveSeq(0)
	if err != nil {
		b.Fatal(err)
	}
	h := kvcache.Header{KV: e.KVConfig(), Tokens: prefix}
	info, err := local.Put(ctx, h, state)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := writer.Put(ctx, h, state); err != nil {
		b.Fatal(err)
	}
	restored := func(c *kvcache.Cache) float64 {
		c.DropRAM()
		e.ClearSeq(0)
		start := time.Now()
		r, err := c.Restore(ctx, e, 0, all, kvcache.RestoreOptions{})
		if err != nil || r.Tokens != len(prefix) || r.FromRAM {
			b.Fatalf("restore %+v, %v", r, err)
		}
		return gen(r.Tokens, start)
	}
	var fromLocal, fromRedis, floor []float64
	for i := 0; i < b.N*5; i++ {
		fromLocal = append(fromLocal, restored(local))
		fromRedis = append(fromRedis, restored(reader))
		if err := e.TruncateSeq(0, len(prefix)); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, gen(len(prefix), time.Time{}))
	}
	if st := reader.SharedStats(); st.Hits < int64(len(fromRedis)) || st.Errors != 0 {
		b.Fatalf("reader shared stats %+v", st)
	}
	l, r, f := stats.Median(fromLocal), stats.Median(fromRedis), stats.Median(floor)
	b.ReportMetric(cold, "cold_ms")
	b.ReportMetric(l, "warm_badger_ms")
	b.ReportMetric(r, "warm_redis_ms")
	b.ReportMetric(f, "floor_ms")
	b.ReportMetric(r/l, "redis_vs_badger")
	b.ReportMetric(float64(info.BlobBytes)/(1<<20), "blob_MiB")
}
