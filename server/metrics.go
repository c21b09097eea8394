package server

import (
	"net/http"
	"regexp"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"

	"github.com/memosrt/memosrt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the server's Prometheus collectors, in a registry of their
// own (no global state).
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec // route, code
	ttft         prometheus.Histogram
	promptTokens *prometheus.CounterVec // kind: cached, composed, recomputed, prefilled
	// composedTurns counts generations that composed memory chunks.
	composedTurns prometheus.Counter
	decodeTokens  prometheus.Counter
	decodeRate    prometheus.Histogram
	rejected      prometheus.Counter
	canceled      prometheus.Counter
	panics        prometheus.Counter
	// bodyTimeouts counts bodies cut by their read deadline (wire.TimeBody).
	bodyTimeouts prometheus.Counter
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memosrt_http_requests_total",
		Help: "HTTP requests by route pattern and status code."}, []string{"route", "code"})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "memosrt_ttft_seconds",
		Help:    "Time to first token: request start to first generated token sampled.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "memosrt_prompt_tokens_total",
		Help: "Prompt tokens: cached (resident, shared or restored KV), composed (placed from memory chunks; recomputed: those of them decoded again) or prefilled (decoded)."}, []string{"kind"})
	m.composedTurns = prometheus.NewCounter(prometheus.CounterOpts{Name: "memosrt_composed_turns_total",
		Help: "Generations whose prompt composed memory chunks (serve --compose)."})
	m.decodeTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "memosrt_decode_tokens_total",
		Help: "Generated tokens."})
	m.decodeRate = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "memosrt_decode_tokens_per_second",
		Help:    "Per-request decode rate: generated tokens over the time from first to last token.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14)})
	m.rejected = prometheus.NewCounter(prometheus.CounterOpts{Name: "memosrt_rejected_requests_total",
		Help: "Requests refused with 429 because the queue was full."})
	m.canceled = prometheus.NewCounter(prometheus.CounterOpts{Name: "memosrt_canceled_requests_total",
		Help: "Generations ended because the client went away."})
	m.panics = prometheus.NewCounter(prometheus.CounterOpts{Name: "memosrt_panics_total",
		Help: "Requests whose handler panicked (answered 500, stack logged)."})
	m.bodyTimeouts = prometheus.NewCounter(prometheus.CounterOpts{Name: "memosrt_http_body_timeouts_total",
		Help: "Requests whose body was not complete within the body read deadline (answered 408, connection closed)."})
	stat := func(f func(memosrt.Stats) float64) func() float64 {
		return func() float64 { return f(s.os.Stats()) }
	}
	kv := func(ram bool) func() float64 {
		return func() float64 {
			st := s.os.Stats()
			if ram {
				return float64(st.KVRAMBytes)
			}
			return float64(st.KVDiskBytes)
		}
	}
	m.reg.MustRegister(m.requests, m.ttft, m.promptTokens, m.composedTurns, m.decodeTokens, m.decodeRate, m.rejected, m.canceled, m.panics, m.bodyTimeouts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_queue_depth",
			Help: "Requests waiting for a slot."}, stat(func(b memosrt.Stats) float64 { return float64(b.Queued) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_busy_slots",
			Help: "Slots (sequences) serving a request."}, stat(func(b memosrt.Stats) float64 { return float64(b.BusySlots) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_engine_requests", ConstLabels: prometheus.Labels{"state": "active"},
			Help: "Requests in the engine: in the running batch (state=active) or waiting for admission (state=queued)."},
			stat(func(b memosrt.Stats) float64 { return float64(b.EngineActive) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_engine_requests", ConstLabels: prometheus.Labels{"state": "queued"},
			Help: "Requests in the engine: in the running batch (state=active) or waiting for admission (state=queued)."},
			stat(func(b memosrt.Stats) float64 { return float64(b.EngineQueued) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_pack_writes_pending",
			Help: "Conversation packs being written in the background."}, stat(func(b memosrt.Stats) float64 { return float64(b.PendingWrites) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_kv_resident_cells",
			Help: "KV cells held by resident packs, counted against n_ctx."}, stat(func(b memosrt.Stats) float64 { return float64(b.ResidentCells) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_n_ctx",
			Help: "Loaded context size, cells."}, stat(func(b memosrt.Stats) float64 { return float64(b.NCtx) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_kv_bytes", ConstLabels: prometheus.Labels{"where": "ram"},
			Help: "Bytes of KV packs: decompressed in the RAM cache (where=ram) or stored compressed on disk (where=disk)."}, kv(true)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_kv_bytes", ConstLabels: prometheus.Labels{"where": "disk"},
			Help: "Bytes of KV packs: decompressed in the RAM cache (where=ram) or stored compressed on disk (where=disk)."}, kv(false)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_disk_bytes",
			Help: "Bytes of the data directory's files (Badger tables and value log), summed now."},
			stat(func(b memosrt.Stats) float64 { return float64(b.DiskBytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_conv_pack_bytes",
			Help: "Stored bytes of conversation packs (bounded by the conversation budget)."},
			stat(func(b memosrt.Stats) float64 { return float64(b.ConvBytes) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_conv_packs_evicted_total",
			Help: "Conversation packs deleted, oldest first, to stay within the conversation budget."},
			stat(func(b memosrt.Stats) float64 { return float64(b.ConvEvicted) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_no_space_refused_total",
			Help: "Writes refused (HTTP 507, skipped conversation packs and value-log rewrites) because the data directory's disk lacked the free space they need."},
			stat(func(b memosrt.Stats) float64 { return float64(b.NoSpace) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_composed_packs_total",
			Help: "Tier packs a background job composed from their members' memory chunks instead of prefilling them (serve --compose auto, once the calibration gate passed a fraction)."},
			stat(func(b memosrt.Stats) float64 { return float64(b.ComposedPacks) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_restore_fallbacks_total",
			Help: "Stored packs that matched a prompt but were refused at restore (room, I/O, a mismatch): the prompt was prefilled."},
			stat(func(b memosrt.Stats) float64 { return float64(b.Fallbacks) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_damaged_total", ConstLabels: prometheus.Labels{"tier": "text"},
			Help: "Damage met: text records that failed their checksum or did not read back (tier=text, each logged and not served), KV packs deleted because their bytes failed (tier=kv)."},
			func() float64 { return float64(s.os.TextStore().Damaged()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_damaged_total", ConstLabels: prometheus.Labels{"tier": "kv"},
			Help: "Damage met: text records that failed their checksum or did not read back (tier=text, each logged and not served), KV packs deleted because their bytes failed (tier=kv)."},
			func() float64 { return float64(s.os.KVCache().Damaged()) }),
		newTextIndexCollector(s.os.TextStore().IndexStats),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_damaged_tables",
			Help: "SSTs of the data directory whose keys did not all read back when it was opened (logged; run memosrt check)."},
			func() float64 {
				if db := s.os.DB(); db != nil {
					return float64(len(db.TableDamage()))
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_badger_arena_bytes",
			Help: "Heap held by Badger's arenas: its table builders' (twice a table each, up to eight pooled between builds), bytes; grows with the data directory's tables up to that pool and the builds in flight."},
			func() float64 {
				if db := s.os.DB(); db != nil {
					return float64(db.ArenaBytes())
				}
				return 0
			}),
		// Go's usual gauges, and the heap live after the last GC
		// (runtime/metrics /gc/heap/live:bytes as go_gc_heap_live_bytes):
		// heap in use also counts garbage not yet collected
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
	)
	if up, ok := s.os.TextStore().Backend().(interface{ Up() bool }); ok {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_text_store_up",
			Help: "1 while the shared text store (--text-store) is connected; 0 while it is down (memory writes and searches answer 503)."},
			func() float64 {
				if up.Up() {
					return 1
				}
				return 0
			}))
	}
	// the shared level's counters straight from kvcache: OS.Stats also sums
	// slots and walks the data directory, for each gauge of each scrape
	shared := s.os.KVCache().SharedStats
	if shared().Enabled {
		up := func() float64 {
			if shared().Up {
				return 1
			}
			return 0
		}
		op := func(what string, f func(kvcache.SharedStats) int64) prometheus.Collector {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memosrt_kv_shared_total", ConstLabels: prometheus.Labels{"op": what},
				Help: "Shared activation level (--kv-store): packs found there (op=hit), found but evicted (miss), written (put), " +
					"dropped because a node deleted them (deleted), failed operations (error), times the deletion channel was lost and other nodes' packs were forgotten (gap)."},
				func() float64 { return float64(f(shared())) })
		}
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "memosrt_kv_shared_up",
				Help: "1 when the shared activation level (--kv-store) had no error within the last second; 0 while it is down (chats prefill instead of restoring from it)."}, up),
			op("hit", func(x kvcache.SharedStats) int64 { return x.Hits }),
			op("miss", func(x kvcache.SharedStats) int64 { return x.Misses }),
			op("put", func(x kvcache.SharedStats) int64 { return x.Puts }),
			op("deleted", func(x kvcache.SharedStats) int64 { return x.Deletes }),
			op("error", func(x kvcache.SharedStats) int64 { return x.Errors }),
			op("gap", func(x kvcache.SharedStats) int64 { return x.Gaps }))
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// observe records one finished generation.
func (m *metrics) observe(res *memosrt.Response) {
	u := res.Usage
	if u.TTFT > 0 {
		m.ttft.Observe(u.TTFT.Seconds())
	}
	m.promptTokens.WithLabelValues("cached").Add(float64(u.CachedTokens))
	m.promptTokens.WithLabelValues("composed").Add(float64(u.ComposedTokens))
	m.promptTokens.WithLabelValues("recomputed").Add(float64(u.RecomputedTokens))
	m.promptTokens.WithLabelValues("prefilled").Add(float64(max(0, u.PromptTokens-u.CachedTokens-u.ComposedTokens)))
	if u.ComposedTokens > 0 {
		m.composedTurns.Inc()
	}
	m.decodeTokens.Add(float64(u.EvalTokens))
	if u.EvalTokens > 1 && u.EvalDuration > 0 {
		m.decodeRate.Observe(float64(u.EvalTokens) / u.EvalDuration.Seconds())
	}
}

// textIndexCollector reports the text tier's in-memory indexes from one
// textmem.Store.IndexStats call a scrape (it reads every loaded index).
type textIndexCollector struct {
	stats       func() textmem.IndexStats
	bytes, mems *prometheus.Desc
}

func newTextIndexCollector(stats func() textmem.IndexStats) *textIndexCollector {
	return &textIndexCollector{stats: stats,
		bytes: prometheus.NewDesc("memosrt_text_index_bytes",
			"Estimated heap of the text tier's in-memory indexes (cubes used since the server started), bytes: grows with the memories they hold.", nil, nil),
		mems: prometheus.NewDesc("memosrt_text_index_memories",
			"Memories in the text tier's in-memory indexes (cubes used since the server started).", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *textIndexCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.bytes; ch <- c.mems }

// Collect implements prometheus.Collector.
func (c *textIndexCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(c.mems, prometheus.GaugeValue, float64(st.Memories))
}
