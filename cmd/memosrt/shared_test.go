package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// generate sends one chat turn of msgs through POST /v1/generate.
func (p *serveProc) generate(t *testing.T, msgs []map[string]string, noCache bool) (memosrt.Response, int) {
	t.Helper()
	var r memosrt.Response
	code := p.call(t, "POST", "/v1/generate", map[string]any{"messages": msgs, "num_predict": 24, "no_cache": noCache}, &r)
	return r, code
}

// story returns a conversation whose system message spans several prefix
// blocks (more than 64 tokens each way).
func story(topic string) []map[string]string {
	sys := strings.Repeat("Lily and her dog Max went to the park near the "+topic+" and played with a red ball. ", 8)
	return []map[string]string{{"role": "system", "content": sys}, {"role": "user", "content": "What did Lily do at the " + topic + "?"}}
}

// Two `memosrt serve` nodes with their own data directories share one
// Redis: a conversation state node A stored restores on node B, whose
// answer equals a cold prefill byte for byte; Redis killed under 16
// clients costs no request (chats prefill), /metrics says it is down and
// sharing resumes once it is back; node A killed, node B serves on.
func TestTwoNodesShareKV(t *testing.T) {
	srv := testutil.StartRedis(t, 0)
	// a store that refuses (no database 99) can never work: serve says so and exits
	out, err := runCLI(t, "serve", "--db", t.TempDir(), "--model", testmodels.Stories(t), "--addr", "127.0.0.1:0",
		"--kv-store", fmt.Sprintf("redis://127.0.0.1:%d/99", srv.Port))
	if err == nil || !strings.Contains(out, "refused") || !strings.Contains(out, "DB index is out of range") {
		t.Fatalf("serve with database 99: %v\n%s", err, out)
	}
	a := startServe(t, t.TempDir(), nil, "--kv-store", srv.URL())
	b := startServe(t, t.TempDir(), nil, "--kv-store", srv.URL(), "--parallel", "4")
	put := `memosrt_kv_shared_total{op="put"}`
	hit := `memosrt_kv_shared_total{op="hit"}`

	msgs := story("lake")
	ra, code := a.generate(t, msgs, false)
	if code != http.StatusOK || ra.Text == "" || ra.Usage.CachedTokens != 0 {
		t.Fatalf("node A: %d %+v", code, ra.Usage)
	}
	testutil.WaitFor(t, "node A's conversation pack in Redis", func() bool { return metric(t, a, put) >= 1 })

	rb, code := b.generate(t, msgs, false)
	if code != http.StatusOK {
		t.Fatalf("node B: %d", code)
	}
	if rb.Usage.CachedTokens != rb.Usage.PromptTokens-1 || rb.CacheSource != memosrt.SourceRestored {
		t.Fatalf("node B cached %d of %d tokens (%s), want all but the last restored from node A's pack",
			rb.Usage.CachedTokens, rb.Usage.PromptTokens, rb.CacheSource)
	}
	cold, _ := b.generate(t, msgs, true)
	if rb.Text != ra.Text || rb.Text != cold.Text {
		t.Fatalf("node B restored %q, node A cold %q, node B cold %q", rb.Text, ra.Text, cold.Text)
	}
	if metric(t, b, hit) < 1 || metric(t, b, "memosrt_kv_shared_up") != 1 {
		t.Fatalf("node B metrics: hit %v, up %v", metric(t, b, hit), metric(t, b, "memosrt_kv_shared_up"))
	}

	// Redis killed while 16 clients chat on node B: every request answers
	// (200, or a deliberate 429/503), by prefill
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	start := make(chan struct{})
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 4; i++ {
				body, _ := json.Marshal(map[string]any{"messages": story(fmt.Sprintf("hill %d-%d", c, i)), "num_predict": 24})
				code := -1 // no answer
				if resp, err := http.Post(b.url+"/v1/generate", "application/json", bytes.NewReader(body)); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	close(start)
	testutil.WaitFor(t, "the load to start", func() bool { mu.Lock(); defer mu.Unlock(); return len(codes) > 0 })
	srv.Kill()
	wg.Wait()
	for code, n := range codes {
		if code != http.StatusOK && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
			t.Fatalf("under load with Redis killed: %d answers %d (all: %v)", n, code, codes)
		}
	}
	t.Logf("answers under load with Redis killed: %v", codes)
	if codes[http.StatusOK] == 0 {
		t.Fatalf("no request answered: %v", codes)
	}
	if r, code := b.generate(t, story("forest"), false); code != http.StatusOK || r.Text == "" {
		t.Fatalf("chat with Redis down: %d", code)
	}
	testutil.WaitFor(t, "node B's /metrics to say Redis is down", func() bool { return metric(t, b, "memosrt_kv_shared_up") == 0 })

	// back (empty): both nodes see it up on their own, and restores resume
	srv.Start()
	testutil.WaitFor(t, "node A's shared level up", func() bool { return metric(t, a, "memosrt_kv_shared_up") == 1 })
	testutil.WaitFor(t, "node B's shared level up", func() bool { return metric(t, b, "memosrt_kv_shared_up") == 1 })
	gap := `memosrt_kv_shared_total{op="gap"}`
	testutil.WaitFor(t, "both nodes to listen for deletions again", func() bool { return metric(t, a, gap) == 1 && metric(t, b, gap) == 1 })
	puts := metric(t, a, put)
	msgs = story("river")
	ra, _ = a.generate(t, msgs, false)
	testutil.WaitFor(t, "node A's new pack in Redis", func() bool { return metric(t, a, put) > puts })
	rb, _ = b.generate(t, msgs, false)
	if rb.Usage.CachedTokens != rb.Usage.PromptTokens-1 || rb.Text != ra.Text {
		t.Fatalf("after Redis came back: node B cached %d of %d, %q vs %q", rb.Usage.CachedTokens, rb.Usage.PromptTokens, rb.Text, ra.Text)
	}

	// node A gone: node B serves on
	a.cmd.Process.Kill()
	<-a.done
	if r, code := b.generate(t, story("sea"), false); code != http.StatusOK || r.Text == "" {
		t.Fatalf("node B after node A was killed: %d", code)
	}
}

// Two serve processes sharing one PostgreSQL (and one Redis): a cube and
// memory added on node A are found on node B, node B's chat retrieves the
// memory, a cube deleted on A is gone on B; with PostgreSQL killed memory
// writes answer 503 and plain chats 200, and once it is back both nodes
// write and read again with nothing acknowledged lost.
func TestTwoNodesShareText(t *testing.T) {
	pg := testutil.StartPostgres(t)
	redis := testutil.StartRedis(t, 0)
	url := pg.CreateDB()
	// an unknown database can never work: serve says so and exits
	out, err := runCLI(t, "serve", "--db", t.TempDir(), "--model", testmodels.Stories(t), "--addr", "127.0.0.1:0",
		"--text-store", pg.URL("nosuchdb"))
	if err == nil || !strings.Contains(out, "--text-store") || !strings.Contains(out, "nosuchdb") {
		t.Fatalf("serve with an unknown database: %v\n%s", err, out)
	}
	bdir := t.TempDir()
	a := startServe(t, t.TempDir(), nil, "--text-store", url, "--kv-store", redis.URL())
	b := startServe(t, bdir, nil, "--text-store", url, "--kv-store", redis.URL())
	if metric(t, a, "memosrt_text_store_up") != 1 || metric(t, b, "memosrt_text_store_up") != 1 {
		t.Fatal("text store not up on both nodes")
	}

	if code := a.call(t, "POST", "/v1/cubes", map[string]any{"name": "alice", "description": "Alice's memories"}, nil); code != http.StatusCreated {
		t.Fatalf("create cube on A: %d", code)
	}
	var cube memosrt.Cube
	if code := b.call(t, "GET", "/v1/cubes/alice", nil, &cube); code != http.StatusOK || cube.Description != "Alice's memories" {
		t.Fatalf("cube on B: %d %+v", code, cube)
	}
	search := func(p *serveProc, q string) (int, []textmem.Hit) {
		var r struct{ Hits []textmem.Hit }
		code := p.call(t, "POST", "/v1/cubes/alice/search", map[string]any{"query": q}, &r)
		return code, r.Hits
	}
	if code, hits := search(b, "lighthouse"); code != http.StatusOK || len(hits) != 0 {
		t.Fatalf("empty cube on B: %d %v", code, hits)
	}
	var m textmem.Memory
	if code := a.call(t, "POST", "/v1/cubes/alice/memories", map[string]any{"text": "Alice keeps the old lighthouse by the bay"}, &m); code != http.StatusCreated {
		t.Fatalf("add on A: %d", code)
	}
	added := time.Now()
	testutil.WaitFor(t, "node B to find node A's memory", func() bool {
		code, hits := search(b, "lighthouse")
		return code == http.StatusOK && len(hits) == 1 && hits[0].Memory.ID == m.ID
	})
	t.Logf("node B found node A's memory %v after the add answered", time.Since(added).Round(time.Millisecond))
	r := b.chat(t, "alice", "Tell me about the lighthouse", false)
	if r.Retrieved != 1 {
		t.Fatalf("node B's chat carried %d memories, want node A's one", r.Retrieved)
	}
	// the cube's pack warmed on A (its memories' prefill, in Redis) is the
	// prefix of a new node C's first chat on the cube: restored, with C's
	// cold output (node B's own slots would already hold its prefix)
	var ps memosrt.PackStatus
	if code := a.call(t, "POST", "/v1/cubes/alice/pack", nil, &ps); code != http.StatusOK || len(ps.Packs) != 1 {
		t.Fatalf("warm on A: %d %+v", code, ps)
	}
	testutil.WaitFor(t, "node A's cube pack in Redis", func() bool { return metric(t, a, `memosrt_kv_shared_total{op="put"}`) >= 1 })
	c := startServe(t, t.TempDir(), nil, "--text-store", url, "--kv-store", redis.URL())
	warm := c.chat(t, "alice", "What color is the lighthouse?", false)
	cold := c.chat(t, "alice", "What color is the lighthouse?", true)
	t.Logf("node C: %d of %d prompt tokens cached (%s); the pack holds %d", warm.Usage.CachedTokens, warm.Usage.PromptTokens, warm.CacheSource, ps.Packs[0].NTokens)
	if warm.CacheSource != memosrt.SourceRestored || warm.Usage.CachedTokens < ps.Packs[0].NTokens || warm.Text != cold.Text || warm.Retrieved != 1 {
		t.Fatalf("node C with node A's pack: cached %d (%s), pack %d tokens; %q vs cold %q",
			warm.Usage.CachedTokens, warm.CacheSource, ps.Packs[0].NTokens, warm.Text, cold.Text)
	}
	c.stop(t)

	// PostgreSQL killed: memory writes and searches 503, chats without a
	// cube 200
	pg.Kill()
	if code := b.call(t, "POST", "/v1/cubes/alice/memories", map[string]any{"text": "written while the store is down"}, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("add with PostgreSQL down: %d, want 503", code)
	}
	if code, _ := search(a, "lighthouse"); code != http.StatusServiceUnavailable {
		t.Fatalf("search with PostgreSQL down: %d, want 503", code)
	}
	if r, code := b.generate(t, story("meadow"), false); code != http.StatusOK || r.Text == "" {
		t.Fatalf("chat with PostgreSQL down: %d", code)
	}
	in := map[string]any{"cube": "alice", "messages": []map[string]string{{"role": "user", "content": "the lighthouse"}}, "num_predict": 8}
	if code := b.call(t, "POST", "/v1/generate", in, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("chat on a cube with PostgreSQL down: %d, want 503", code)
	}
	testutil.WaitFor(t, "node B's /metrics to say the text store is down", func() bool { return metric(t, b, "memosrt_text_store_up") == 0 })
	pg.Start()
	testutil.WaitFor(t, "node B's text store up again", func() bool { return metric(t, b, "memosrt_text_store_up") == 1 })
	testutil.WaitFor(t, "node B to write again", func() bool {
		return b.call(t, "POST", "/v1/cubes/alice/memories", map[string]any{"text": "Alice repainted the lighthouse red"}, nil) == http.StatusCreated
	})
	testutil.WaitFor(t, "node A to find both memories", func() bool {
		code, hits := search(a, "lighthouse")
		return code == http.StatusOK && len(hits) == 2
	})

	// the cube deleted on A is gone on B, with the packs node B made of it
	var list struct{ Cubes []memosrt.Cube }
	if code := b.call(t, "GET", "/v1/cubes", nil, &list); code != http.StatusOK || len(list.Cubes) != 1 || list.Cubes[0].Name != "alice" {
		t.Fatalf("cubes on B: %d %+v", code, list)
	}
	cubePacks := func(p *serveProc, cube string) int {
		var r struct{ Packs []kvcache.Info }
		p.call(t, "GET", "/v1/packs", nil, &r)
		n := 0
		for _, k := range r.Packs {
			if !k.Remote && (k.Label == cube || k.Label == "conv:"+cube) {
				n++
			}
		}
		return n
	}
	alicePacks := func(p *serveProc) int { return cubePacks(p, "alice") }
	testutil.WaitFor(t, "node B's conversation pack of cube alice", func() bool { return alicePacks(b) >= 1 })
	if code := a.call(t, "DELETE", "/v1/cubes/alice", nil, nil); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("delete cube on A: %d", code)
	}
	if code := b.call(t, "GET", "/v1/cubes/alice", nil, nil); code != http.StatusNotFound {
		t.Fatalf("cube on B after delete on A: %d, want 404", code)
	}
	if code, _ := search(b, "lighthouse"); code != http.StatusNotFound {
		t.Fatalf("search on B after delete on A: %d, want 404", code)
	}
	if code := b.call(t, "GET", "/v1/cubes", nil, &list); code != http.StatusOK || len(list.Cubes) != 0 {
		t.Fatalf("cubes on B after delete on A: %d %+v", code, list)
	}
	testutil.WaitFor(t, "node B to drop its packs of the deleted cube", func() bool { return alicePacks(b) == 0 })

	// a cube deleted while node B is down: back, node B drops its packs
	// of it; while it is down, the CLI on its directory says where its
	// memories are instead of showing the directory's own (empty) tier
	if code := a.call(t, "POST", "/v1/cubes/carol/memories", map[string]any{"text": "Carol grows tomatoes"}, nil); code != http.StatusCreated {
		t.Fatalf("add to carol: %d", code)
	}
	b.chat(t, "carol", "Tell me about the tomatoes", false)
	testutil.WaitFor(t, "node B's conversation pack of cube carol", func() bool { return cubePacks(b, "carol") >= 1 })
	b.stop(t)
	if out, err := runCLI(t, "mem", "ls", "--db", bdir, "--cube", "carol"); err == nil || !strings.Contains(out, "shared text store") {
		t.Fatalf("mem ls on node B's directory while it is down: %v\n%s", err, out)
	}
	if code := a.call(t, "DELETE", "/v1/cubes/carol", nil, nil); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("delete carol on A: %d", code)
	}
	b = startServe(t, bdir, nil, "--text-store", url, "--kv-store", redis.URL())
	testutil.WaitFor(t, "node B, restarted, to drop its packs of the cube deleted meanwhile", func() bool { return cubePacks(b, "carol") == 0 })
}
