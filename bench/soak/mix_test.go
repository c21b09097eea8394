package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testmodels"
)

// The mixed-traffic soak: a `memosrt serve` with its default budgets (a
// laptop's) under 4 clients sharing one cube that has a pack, each doing
// Ollama chat turns (a conversation that grows until it is reset),
// memory add + search, generate and OpenAI streaming chat. Every
// mixEvery it prints the data directory's allocated bytes, the serve
// process's RSS and the live heap; at the end it checks that each levels
// off (growth over the last quarter under 5%) under its bound. `make
// soak-mix` runs it (SOAK_MIX=12m); skipped without SOAK_MIX.
const (
	mixClients = 4
	mixEvery   = 10 * time.Second
	mixCube    = "mix"
	// mixTurns is the longest conversation before a client starts a new one
	mixTurns = 12
)

// Bounds the mix checks (documented in docs/data-directory.md, "Disk and
// memory bounds"): the data directory holds at most the conversation-pack
// budget (serve's default 256 MiB) and the activation tier's KV budget (256
// MiB), each with a third of it stale, and Badger's slack; the live heap
// at most the RAM level's budget (128 MiB) and a base; RSS at most twice the live heap (GOGC=100), the
// value-log files Badger maps and the model with its KV cache.
const (
	convDefault = 256 << 20
	kvDefault   = 256 << 20
	ramDefault  = 128 << 20
	// badgerSlack: two memtable logs (2 x 8 MiB), four value-log files
	// (4 x 32 MiB: the one written; the values made stale since the last
	// GC pass, which starts once the log has grown by a file, checked
	// every 5 s; the one a pass is rewriting; the one its rewrites fill),
	// level 0 (an 8 MiB memtable flush and the 8 MiB of filler Reclaim
	// writes to flush one) and the rest of the LSM tree (10 MiB): 170 MiB
	badgerSlack = (2*8 + 4*32 + 2*8 + 10) << 20
	// diskBound: the packs' budgets and their stale third (datadir's GC
	// keeps a value-log file until a quarter of it is stale, so a file
	// holds at most a third of its live bytes again) and the slack: 853 MiB
	diskBound = (convDefault+kvDefault)*4/3 + badgerSlack
	// heapBase: zstd encoders (2 x 8 MiB of history), Badger's block cache
	// (32 MiB), up to two 8 MiB memtables, Badger's table builders, the
	// indexes and buffers
	heapBase  = 128 << 20
	heapBound = ramDefault + heapBase
	// rssBase: the model, its KV cache and the C heap (stories260K)
	rssBase  = 128 << 20
	rssBound = 2*heapBound + diskBound + rssBase
)

// dirKinds is a data directory's files by kind: "sst" (Badger's
// tables), "vlog" (value-log files), "mem" (memtable logs) and "other"
// (MANIFEST, DISCARD, ...): allocated bytes and files of each.
type dirKinds struct {
	bytes map[string]int64
	files map[string]int
}

// String is each kind as files/MiB, for the soaks' lines.
func (k dirKinds) String() string {
	var b strings.Builder
	for _, n := range []string{"sst", "vlog", "mem", "other"} {
		fmt.Fprintf(&b, " %s %d/%.1f", n, k.files[n], float64(k.bytes[n])/(1<<20))
	}
	return b.String()
}

// count is the number of files of every kind.
func (k dirKinds) count() int {
	n := 0
	for _, c := range k.files {
		n += c
	}
	return n
}

// dirUsage walks dir once and returns the allocated size of its files,
// bytes (du), and the same by kind. A file gone between the listing and
// its stat (a compaction) is skipped.
func dirUsage(dir string) (int64, dirKinds) {
	var total int64
	k := dirKinds{bytes: map[string]int64{}, files: map[string]int{}}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		n := strings.TrimPrefix(filepath.Ext(path), ".")
		if n != "sst" && n != "vlog" && n != "mem" {
			n = "other"
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
				k.bytes[n] += st.Blocks * 512
				k.files[n]++
			}
		}
		return nil
	})
	return total, k
}

// keepDir copies the data directory db to SOAK_KEEP (a directory that
// must not exist) when that is set, for diagnosis after the run.
func keepDir(t *testing.T, db string) {
	if dst := os.Getenv("SOAK_KEEP"); dst != "" {
		if err := os.CopyFS(dst, os.DirFS(db)); err != nil {
			t.Logf("SOAK_KEEP: %v", err)
		}
	}
}

// rssBytes is pid's resident set size, bytes (VmRSS in /proc/pid/status).
func rssBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// mixStep runs one operation of the mix; hist is the client's conversation.
func (c *client) mixStep(ctx context.Context, hist *[]map[string]any) {
	hdr := []string{"X-Memosrt-Cube", mixCube}
	switch r := c.rng.IntN(100); {
	case r < 40: // an Ollama chat turn of the client's conversation
		if len(*hist) >= 2*mixTurns {
			*hist = nil
		}
		msgs := append(slices.Clone(*hist), map[string]any{"role": "user", "content": c.text(6)})
		a, ok := c.call(ctx, "ollama-chat", "POST", "/api/chat", map[string]any{"model": "stories260K", "stream": false,
			"messages": msgs, "options": map[string]any{"num_predict": 16 + c.rng.IntN(16), "temperature": 0.7, "seed": c.rng.IntN(1000)}}, false, hdr...)
		var out struct{ Message struct{ Content string } }
		if ok && json.Unmarshal(a.body, &out) == nil {
			*hist = append(msgs, map[string]any{"role": "assistant", "content": out.Message.Content})
		}
	case r < 60: // memory add, then search
		c.call(ctx, "mem-add", "POST", "/v1/cubes/"+mixCube+"/memories", map[string]any{"text": c.text(8)}, false)
		c.call(ctx, "search", "POST", "/v1/cubes/"+mixCube+"/search", map[string]any{"query": c.text(2), "k": 5}, false)
	case r < 75: // generate
		c.call(ctx, "ollama-generate", "POST", "/api/generate", map[string]any{"model": "stories260K", "stream": false,
			"prompt": c.text(5), "options": map[string]any{"num_predict": 24}}, false)
	default: // OpenAI streaming chat
		c.call(ctx, "openai-chat", "POST", "/v1/chat/completions", map[string]any{"model": "stories260K", "stream": true, "max_tokens": 24,
			"messages": []map[string]any{{"role": "user", "content": c.text(5)}}}, false, hdr...)
	}
}

// mixSetup gives the mix's cube 8 memories and warms its pack.
func mixSetup(t *testing.T, srv *server) {
	t.Helper()
	for i := range 8 {
		if code := post(srv.base()+"/v1/cubes/"+mixCube+"/memories", map[string]any{"text": fmt.Sprintf("Lily has %d red balls and a big dog.", i+2)}); code != http.StatusCreated {
			t.Fatalf("memory add: %d", code)
		}
	}
	if code := post(srv.base()+"/v1/cubes/"+mixCube+"/pack", map[string]any{}); code >= 300 {
		t.Fatalf("pack warm: %d", code)
	}
}

// startMix starts the mix's clients (ids from firstID on), each running
// mixStep until ctx ends, counted in wg and tallied in tl.
func startMix(ctx context.Context, wg *sync.WaitGroup, srv *server, tl *tally, firstID int) {
	for i := firstID; i < firstID+mixClients; i++ {
		c := &client{id: i, srv: srv, rng: rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), tally: tl,
			acked: map[string]bool{}, maybe: map[string]bool{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hist []map[string]any
			for ctx.Err() == nil {
				c.mixStep(ctx, &hist)
			}
		}()
	}
}

func TestMix(t *testing.T) {
	env := os.Getenv("SOAK_MIX")
	if env == "" {
		t.Skip("SOAK_MIX unset: `make soak-mix` (SOAK_MIX=12m) runs the mixed-traffic soak")
	}
	dur, err := time.ParseDuration(env)
	if err != nil {
		t.Fatalf("SOAK_MIX=%q: %v", env, err)
	}
	model := testmodels.Stories(t)
	db := t.TempDir()
	args := []string{"--model", model}
	if th := os.Getenv("SOAK_THREADS"); th != "" {
		args = append(args, "--threads", th)
	}
	args = append(args, strings.Fields(os.Getenv("SOAK_MIX_ARGS"))...)
	pprofDir, pprofBase := os.Getenv("SOAK_PPROF"), ""
	if pprofDir != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		pprofBase = "http://" + ln.Addr().String()
		args = append(args, "--pprof-addr", ln.Addr().String())
		ln.Close()
	}
	srv := &server{t: t, db: db, args: args}
	srv.start()
	mixSetup(t, srv)

	tl := &tally{byOp: map[string]int{}, codes: map[int]int{}}
	ctx, stop := context.WithTimeout(context.Background(), dur)
	defer stop()
	var wg sync.WaitGroup
	startMix(ctx, &wg, srv, tl, 0)
	type gauge struct {
		at              time.Duration
		disk, rss, heap float64
		requests, conv  float64
		packs, ram      float64 // packs' stored bytes, states in RAM
		mems            float64 // memories stored (memoryCount)
		textIx          float64 // the text tier's index, estimated (memosrt_text_index_bytes)
		goroutn         float64
	}
	var gs []gauge
	pid := srv.cmd.Process.Pid
	start := time.Now()
	read := func() {
		m, _ := readMetrics(srv.base())
		tl.mu.Lock()
		n := 0
		for _, v := range tl.byOp {
			n += v
		}
		tl.mu.Unlock()
		disk, kinds := dirUsage(db)
		g := gauge{at: time.Since(start), disk: float64(disk), rss: float64(rssBytes(pid)), heap: m["go_gc_heap_live_bytes"],
			requests: float64(n), conv: m["memosrt_conv_packs_evicted_total"], goroutn: m["go_goroutines"],
			packs: m[`memosrt_kv_bytes{where="disk"}`], ram: m[`memosrt_kv_bytes{where="ram"}`], mems: float64(memoryCount(srv.base())), textIx: m["memosrt_text_index_bytes"]}
		gs = append(gs, g)
		fmt.Printf("mix t=%4.0fs requests %6.0f memories %5.0f disk %7.1f MiB (packs %6.1f) rss %7.1f MiB heap live %6.1f MiB (RAM level %6.1f, text index %5.1f) goroutines %3.0f conv evicted %5.0f; files/MiB%s\n",
			g.at.Seconds(), g.requests, g.mems, g.disk/(1<<20), g.packs/(1<<20), g.rss/(1<<20), g.heap/(1<<20), g.ram/(1<<20), g.textIx/(1<<20), g.goroutn, g.conv, kinds)
		if pprofDir != "" {
			saveProfile(pprofBase+"/debug/pprof/heap", filepath.Join(pprofDir, fmt.Sprintf("heap-%04.0f.pb.gz", g.at.Seconds())))
		}
	}
	read()
	tick := time.NewTicker(mixEvery)
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
		case <-tick.C:
			read()
		}
	}
	tick.Stop()
	wg.Wait()
	read()
	stopErr := srv.stop()
	keepDir(t, db)
	text := textTierBytes(t, db)
	perMem := text.perMemory()
	t.Logf("memories at the end: %d stored, %.1f MiB on disk (%.1f MiB of keys and values, %d entries at %.1f bytes each beyond them), %.0f bytes per memory",
		text.memories, float64(text.bytes)/(1<<20), float64(text.logical)/(1<<20), text.keys, text.entryCost, perMem)
	if f := os.Getenv("SOAK_SERVER_LOG"); f != "" {
		srv.logMu.Lock()
		os.WriteFile(f, srv.log.Bytes(), 0o644) // the server's log, for diagnosis
		srv.logMu.Unlock()
	}

	t.Logf("mix %s (%d clients, one cube with a pack): %d answered requests; by op %v; by status %v; %d failures",
		dur, mixClients, int(gs[len(gs)-1].requests), tl.byOp, tl.codes, len(tl.failures))
	for _, f := range tl.failures[:min(20, len(tl.failures))] {
		t.Log("failure:", f)
	}
	if len(tl.failures) > 0 {
		t.Errorf("%d failed requests", len(tl.failures))
	}
	if stopErr != nil {
		t.Errorf("serve stop: %v", stopErr)
	}
	// levelling off: the last quarter's growth (its last sample against
	// the maximum before it) under 5%, and every sample under its bound;
	// the slack (disk beyond the packs' stored bytes and the memories,
	// heap beyond the RAM level and the text tier's index of the
	// memories) under its bound at every sample, also
	// while the budgets fill. The memories (the mix adds them and records
	// every chat turn as one, and deletes none) are their count at the
	// sample times the text tier's bytes per memory at the end
	// (textdata_test.go).
	q := gs[len(gs)*3/4]
	for _, k := range []struct {
		name  string
		get   func(gauge) float64
		bound float64
	}{{"disk", func(g gauge) float64 { return g.disk }, diskBound},
		{"disk beyond packs and their stale third, and the memories", func(g gauge) float64 { return g.disk - g.packs*4/3 - perMem*g.mems }, badgerSlack},
		{"rss", func(g gauge) float64 { return g.rss }, rssBound},
		{"heap live", func(g gauge) float64 { return g.heap }, heapBound},
		{"heap beyond the RAM level and the text index", func(g gauge) float64 { return g.heap - g.ram - g.textIx }, heapBase}} {
		var before, peak float64
		for _, g := range gs {
			if g.at <= q.at {
				before = max(before, k.get(g))
			}
			peak = max(peak, k.get(g))
		}
		end := k.get(gs[len(gs)-1])
		t.Logf("%s: max %.1f MiB up to t=%.0fs, %.1f MiB at the end, peak %.1f MiB (bound %.0f MiB)",
			k.name, before/(1<<20), q.at.Seconds(), end/(1<<20), peak/(1<<20), k.bound/(1<<20))
		if end > 1.05*before {
			t.Errorf("%s still growing: %.1f MiB at the end, %.1f MiB at most before the last quarter", k.name, end/(1<<20), before/(1<<20))
		}
		if peak > k.bound {
			t.Errorf("%s %.1f MiB passed its bound %.0f MiB", k.name, peak/(1<<20), k.bound/(1<<20))
		}
	}
}

// post sends body as JSON and returns the status (0 on a transport error).
func post(url string, body any) int {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(b)))
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// saveProfile writes the heap profile at url (serve --pprof-addr's
// /debug/pprof/heap) to file; nothing when the server does not serve one.
func saveProfile(url, file string) {
	resp, err := http.Get(url)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	if b, err := io.ReadAll(resp.Body); err == nil {
		os.WriteFile(file, b, 0o644)
	}
}
