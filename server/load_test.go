package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	goruntime "runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
)

// loadResult counts a load run's answers by status.
type loadResult struct {
	ok, busy, other atomic.Int64
	tokens          atomic.Int64
	firstErr        atomic.Value

	mu  sync.Mutex
	lat []time.Duration // answered (200) requests, send to full body
}

// percentile returns the q-quantile (0..1) of the answered requests'
// latencies, nearest rank.
func (r *loadResult) percentile(q float64) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lat) == 0 {
		return 0
	}
	l := slices.Clone(r.lat)
	slices.Sort(l)
	return l[min(len(l)-1, int(math.Ceil(q*float64(len(l))))-1)]
}

// runLoad sends clients × perClient requests (mixed Ollama streaming chat,
// OpenAI non-streaming chat, Ollama generate) and returns when all are done.
func runLoad(t testing.TB, base string, clients, perClient int, hc *http.Client) *loadResult {
	res := &loadResult{}
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; i < perClient; i++ {
				var path string
				var body map[string]any
				prompt := fmt.Sprintf("Client %d asks question %d about the park", c, i%7)
				switch i % 3 {
				case 0:
					path, body = "/api/chat", map[string]any{"model": testModel, "messages": []map[string]string{{"role": "user", "content": prompt}}, "options": greedyOpts(8)}
				case 1:
					path, body = "/v1/chat/completions", map[string]any{"model": testModel, "max_tokens": 8, "temperature": 0,
						"messages": []map[string]string{{"role": "user", "content": prompt}}}
				default:
					path, body = "/api/generate", map[string]any{"model": testModel, "prompt": prompt, "raw": true, "stream": false, "options": greedyOpts(8)}
				}
				j, _ := json.Marshal(body)
				sent := time.Now()
				resp, err := hc.Post(base+path, "application/json", bytes.NewReader(j))
				if err != nil {
					res.other.Add(1)
					res.firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case err != nil:
					res.other.Add(1)
					res.firstErr.CompareAndSwap(nil, err.Error())
				case resp.StatusCode == http.StatusTooManyRequests:
					res.busy.Add(1)
				case resp.StatusCode != http.StatusOK || bytes.Contains(b, []byte(`"error"`)):
					res.other.Add(1)
					res.firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %d %s", path, resp.StatusCode, b))
				default:
					res.ok.Add(1)
					res.mu.Lock()
					res.lat = append(res.lat, time.Since(sent))
					res.mu.Unlock()
				}
			}
		}(c)
	}
	wg.Wait()
	return res
}

// waitGoroutines waits until the goroutine count is back to at most n,
// or fails after 10 s. It polls: teardown has no event to wait on.
func waitGoroutines(t testing.TB, n int) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := goruntime.NumGoroutine()
		if g <= n || time.Now().After(deadline) {
			return g
		}
		goruntime.Gosched()
		time.Sleep(20 * time.Millisecond)
	}
}

func heapMB() float64 {
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// TestLoad runs a bounded load on loopback: only deliberate 429s, no
// goroutine leak, steady heap. Small by default; MEMOSRT_LOAD=CLIENTSxREQS
// (e.g. 32x200) runs the full one.
func TestLoad(t *testing.T) {
	clients, per := 4, 6
	if v := os.Getenv("MEMOSRT_LOAD"); v != "" {
		var err error
		if _, err = fmt.Sscanf(v, "%dx%d", &clients, &per); err != nil {
			t.Fatalf("MEMOSRT_LOAD=%q: want CLIENTSxREQUESTS", v)
		}
	}
	// MEMOSRT_LOAD_FSYNC=1: every commit fsyncs, as serve does by default
	// (tests turn it off)
	e := newEnv(t, envConfig{nseq: 4, nctx: 4096, mo: memosrt.Options{MaxQueue: clients / 2}, sync: os.Getenv("MEMOSRT_LOAD_FSYNC") != ""})
	pre := goruntime.NumGoroutine()
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	// warm-up round, then the baseline
	runLoad(t, e.url(), clients, 1, hc)
	tr.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	base := waitGoroutines(t, pre+2)
	heap0 := heapMB()
	rejected0 := readMetric(t, e, "memosrt_rejected_requests_total")
	start := time.Now()
	r := runLoad(t, e.url(), clients, per, hc)
	d := time.Since(start)
	tr.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections() // readMetric's
	heap1 := heapMB()
	g := waitGoroutines(t, base+2)
	total := int64(clients * per)
	t.Logf("load %d clients × %d requests (fsync %v): %d answered, %d 429, %d other in %v (%.0f answered req/s); answered latency p50 %v p95 %v; goroutines %d → %d; heap %.1f → %.1f MiB",
		clients, per, os.Getenv("MEMOSRT_LOAD_FSYNC") != "", r.ok.Load(), r.busy.Load(), r.other.Load(), d.Round(time.Millisecond),
		float64(r.ok.Load())/d.Seconds(), r.percentile(0.5).Round(time.Microsecond*100), r.percentile(0.95).Round(time.Microsecond*100), base, g, heap0, heap1)
	if r.other.Load() != 0 {
		t.Fatalf("%d failures, first: %v", r.other.Load(), r.firstErr.Load())
	}
	if r.ok.Load()+r.busy.Load() != total || r.ok.Load() == 0 {
		t.Fatalf("%d ok + %d busy of %d", r.ok.Load(), r.busy.Load(), total)
	}
	if g > base+2 {
		buf := make([]byte, 1<<20)
		n := goruntime.Stack(buf, true)
		t.Fatalf("goroutines %d after the load, %d before:\n%s", g, base, buf[:n])
	}
	if heap1 > heap0+64 {
		t.Fatalf("heap grew from %.1f to %.1f MiB", heap0, heap1)
	}
	if st := e.os.Stats(); st.BusySlots != 0 || st.Queued != 0 {
		t.Fatalf("after the load: %+v", st)
	}
	if got := readMetric(t, e, "memosrt_rejected_requests_total") - rejected0; got != float64(r.busy.Load()) {
		t.Fatalf("rejected metric grew by %v, clients saw %d 429s", got, r.busy.Load())
	}
}
