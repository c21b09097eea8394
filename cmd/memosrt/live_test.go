package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/internal/serveclient"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/scheduler"
)

// serveProc is a `memosrt serve` started by a test.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	stderr syncBuffer
	done   chan error
}

// syncBuffer is the serve's stderr as read so far: written by the goroutine
// reading the pipe, read by the test while serve runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteString(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(v)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServe starts `memosrt serve` on db (stories260K, a free loopback
// port) and waits until it is ready; the test's end stops it.
func startServe(t *testing.T, db string, env []string, args ...string) *serveProc {
	t.Helper()
	full := append([]string{"serve", "--db", db, "--model", testmodels.Stories(t), "--addr", "127.0.0.1:0",
		"--threads", "2", "--ctx", "1024", "--parallel", "2", "--min-persist-tokens", "1"}, args...)
	return startProc(t, env, full...)
}

// startProc starts memosrt with args, a serve command, and waits until
// it is ready; the test's end stops it.
func startProc(t *testing.T, env []string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{cmd: exec.Command(binPath, args...), done: make(chan error, 1)}
	testutil.DieWithParent(p.cmd)
	p.cmd.Env = append(os.Environ(), env...)
	pr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.WriteString(line + "\n")
			if rest, ok := strings.CutPrefix(line, "memosrt: ready on "); ok {
				ready <- strings.Fields(rest)[0]
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.url = <-ready:
	case err := <-p.done:
		t.Fatalf("serve exited before ready: %v\n%s", err, p.stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve not ready after 2 minutes\n%s", p.stderr.String())
	}
	return p
}

// stop sends SIGINT and waits for a clean exit; idempotent.
func (p *serveProc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("serve exit: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		t.Errorf("serve did not stop\n%s", p.stderr.String())
	}
}

// call sends a JSON request to the server and decodes the answer.
func (p *serveProc) call(t *testing.T, method, path string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, p.url+path, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

// With `memosrt serve` running on a data directory, the CLI's commands on
// that directory go through the server instead of failing on the lock, and
// `run` uses the server's model: restored and cold output are equal.
func TestCLINextToServer(t *testing.T) {
	db := t.TempDir()
	p := startServe(t, db, nil)
	if out := must(t, "mem", "add", "--db", db, "--cube", "lily", "Lily has a dog named Max."); len(strings.TrimSpace(out)) != 24 {
		t.Fatalf("mem add printed %q, want an id", out)
	}
	must(t, "mem", "add", "--db", db, "--cube", "lily", "Max likes to run in the park.")
	if out := must(t, "mem", "ls", "--db", db, "--cube", "lily"); strings.Count(out, "\n") != 3 || !strings.Contains(out, "run in the park") {
		t.Fatalf("mem ls:\n%s", out)
	}
	if out := must(t, "mem", "search", "--db", db, "--cube", "lily", "park"); !strings.Contains(out, "Max likes to run") {
		t.Fatalf("mem search:\n%s", out)
	}
	// the memories reached the server's OS
	var list struct{ Memories []json.RawMessage }
	if p.call(t, "GET", "/v1/cubes/lily/memories", nil, &list); len(list.Memories) != 2 {
		t.Fatalf("the server holds %d memories", len(list.Memories))
	}
	must(t, "kv", "warm", "--db", db, "--cube", "lily")
	if out := must(t, "kv", "ls", "--db", db); !strings.Contains(out, "lily") {
		t.Fatalf("kv ls:\n%s", out)
	}
	var st scheduler.CubeTiers
	out := must(t, "tiers", "--db", db, "--cube", "lily", "--tick", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.PackTokens == 0 || len(st.Memories) != 2 || st.Memories[0].Tier != scheduler.TierActivation {
		t.Fatalf("tiers: %v %+v", err, st)
	}
	warm := runJSONOut(t, "run", "--db", db, "--cube", "lily", "--num-predict", "24", "--json", "Once upon a time")
	cold := runJSONOut(t, "run", "--db", db, "--cube", "lily", "--num-predict", "24", "--no-cache", "--json", "Once upon a time")
	if warm.CachedTokens < st.PackTokens || cold.CachedTokens != 0 || warm.Response != cold.Response || warm.Response == "" {
		t.Fatalf("run through the server: warm %+v\ncold %+v (pack %d tokens)", warm, cold, st.PackTokens)
	}
	// the server's model answers, but a --model that does not exist is
	// still an error (it once answered with the server's model, exit 0)
	if out, err := runCLI(t, "run", "--db", db, "--model", db+"/no-such-model.gguf", "--num-predict", "2", "hi"); err == nil || !strings.Contains(out, "no such file") {
		t.Fatalf("run --model <missing> next to the server: %v %s", err, out)
	}
	if out, err := runCLI(t, "lora", "ls", "--db", db); err == nil || !strings.Contains(out, "memosrt serve is running") {
		t.Fatalf("lora ls next to the server: %v %s", err, out)
	}
	// A stale serve.json in another directory that names this server's
	// address (its own server died, this one took the port) is not
	// trusted: the CLI opens that directory itself.
	other := t.TempDir()
	b, err := os.ReadFile(db + "/" + serveclient.File)
	if err != nil {
		t.Fatal(err)
	}
	var info serveclient.Info
	if err := json.Unmarshal(b, &info); err != nil || info.Instance == "" {
		t.Fatalf("%s: %v %+v", serveclient.File, err, info)
	}
	info.Instance = "a-server-that-died"
	b, _ = json.Marshal(info)
	if err := os.WriteFile(other+"/"+serveclient.File, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := must(t, "mem", "ls", "--db", other, "--cube", "lily"); strings.Contains(out, "Max") {
		t.Fatalf("mem ls on another directory reached this server:\n%s", out)
	}
	p.stop(t)
	// the server is gone: the same commands open the directory themselves
	if out := must(t, "mem", "ls", "--db", db, "--cube", "lily"); strings.Count(out, "\n") != 3 {
		t.Fatalf("mem ls after the server stopped:\n%s", out)
	}
	if _, err := os.Stat(db + "/" + serveclient.File); !os.IsNotExist(err) {
		t.Fatalf("%s left behind: %v", serveclient.File, err)
	}
}

type tierView struct {
	PackID   string `json:"pack_id"`
	Tokens   int    `json:"pack_tokens"`
	KVBytes  int64  `json:"kv_bytes"`
	KVBudget int64  `json:"kv_budget"`
	Memories []struct {
		ID   string  `json:"id"`
		Tier string  `json:"tier"`
		Heat float64 `json:"heat"`
	} `json:"memories"`
	Jobs        []json.RawMessage      `json:"jobs"`
	Transitions []scheduler.Transition `json:"transitions"`
}

func (p *serveProc) tiers(t *testing.T, cube string) tierView {
	t.Helper()
	var v tierView
	if code := p.call(t, "GET", "/v1/cubes/"+cube+"/tiers?limit=0", nil, &v); code != http.StatusOK {
		t.Fatalf("tiers: %d", code)
	}
	if v.KVBytes > v.KVBudget {
		t.Fatalf("KV budget broken: %d > %d", v.KVBytes, v.KVBudget)
	}
	return v
}

func (p *serveProc) tier(t *testing.T, cube, id string) string {
	for _, m := range p.tiers(t, cube).Memories {
		if m.ID == id {
			return m.Tier
		}
	}
	return ""
}

// chat runs one chat turn through POST /v1/generate (every field of the
// memosrt.Response comes back).
func (p *serveProc) chat(t *testing.T, cube, text string, noCache bool) memosrt.Response {
	t.Helper()
	var r memosrt.Response
	in := map[string]any{"cube": cube, "messages": []map[string]string{{"role": "user", "content": text}}, "num_predict": 16, "no_cache": noCache}
	if code := p.call(t, "POST", "/v1/generate", in, &r); code != http.StatusOK {
		t.Fatalf("chat: %d", code)
	}
	return r
}

// The memory OS works through `memosrt serve` alone: chat turns that
// retrieve a memory heat it; a tick (on its period) moves it into the
// activation tier and the next chat's cached tokens cover the pack, with
// the cold output; three days on the scheduler's clock cool it: it is
// demoted and its bytes freed; the KV budget holds throughout.
func TestServeSchedulerLive(t *testing.T) {
	db := t.TempDir()
	p := startServe(t, db, nil, "--debug-clock", "--tick-interval", "50ms", "--kv-budget", "1000000")
	var dog struct{ ID string }
	p.call(t, "POST", "/v1/cubes/lily/memories", map[string]string{"text": "Lily has a dog named Max."}, &dog)
	p.call(t, "POST", "/v1/cubes/lily/memories", map[string]string{"text": "Tom likes red apples."}, nil)
	const q = "Where does the dog Max run?"
	// each turn that retrieves the dog is a visit and an interaction: heat
	// 2 per turn plus recency 1 (MemoryOS); three turns pass 5 on the wall clock
	for range 3 {
		if r := p.chat(t, "lily", q, false); r.Retrieved != 1 {
			t.Fatalf("the chat retrieved %d memories, want the dog", r.Retrieved)
		}
	}
	testutil.WaitFor(t, "the dog to enter the activation tier", func() bool { return p.tier(t, "lily", dog.ID) == scheduler.TierActivation })
	v := p.tiers(t, "lily")
	warm, cold := p.chat(t, "lily", q, false), p.chat(t, "lily", q, true)
	if warm.Usage.CachedTokens < v.Tokens || warm.PackMemories != 1 || warm.Text != cold.Text {
		t.Fatalf("after the promotion: cached %d of a %d-token pack (%s), output %q, cold %q", warm.Usage.CachedTokens, v.Tokens, warm.CacheSource, warm.Text, cold.Text)
	}
	if code := p.call(t, "POST", "/v1/debug/clock", map[string]float64{"advance_s": 72 * 3600}, nil); code != http.StatusNoContent {
		t.Fatalf("clock: %d", code)
	}
	testutil.WaitFor(t, "the dog to cool down to the text tier", func() bool { return p.tier(t, "lily", dog.ID) == scheduler.TierText })
	if v := p.tiers(t, "lily"); v.PackID != "" || v.KVBytes != 0 {
		t.Fatalf("after the demotion: pack %q, %d KV bytes", v.PackID, v.KVBytes)
	}
	var packs struct{ Packs []struct{ Label string } }
	p.call(t, "GET", "/v1/cubes/lily/pack", nil, &packs)
	for _, pk := range packs.Packs {
		if pk.Label == "lily" {
			t.Fatalf("a tier pack is left: %+v", packs)
		}
	}
}

// A tier job cut short after it stored its pack (the process dies) is
// finished by the next start, reusing that pack (nothing decoded again),
// and the move is recorded once.
func TestServeResumesJobAfterCrash(t *testing.T) {
	db := t.TempDir()
	p := startServe(t, db, []string{"MEMOSRT_FAILPOINT=tiers-after-put"}, "--tick-interval", "50ms")
	var dog struct{ ID string }
	p.call(t, "POST", "/v1/cubes/lily/memories", map[string]string{"text": "Lily has a dog named Max."}, &dog)
	for range 3 {
		p.chat(t, "lily", "Where does the dog Max run?", false)
	}
	select {
	case <-p.done: // exited (Wait set ProcessState: stop does nothing)
	case <-time.After(2 * time.Minute):
		t.Fatalf("the failpoint did not fire\n%s", p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "failpoint tiers-after-put") {
		t.Fatalf("serve exited without the failpoint:\n%s", p.stderr.String())
	}
	q := startServe(t, db, nil, "--tick-interval", "50ms")
	testutil.WaitFor(t, "the pending job to finish", func() bool { return q.tier(t, "lily", dog.ID) == scheduler.TierActivation })
	v := q.tiers(t, "lily")
	var moves []scheduler.Transition
	for _, tr := range v.Transitions {
		if tr.Memory == dog.ID {
			moves = append(moves, tr)
		}
	}
	if len(moves) != 1 || moves[0].Decoded != 0 || moves[0].To != scheduler.TierActivation || len(v.Jobs) != 0 {
		t.Fatalf("after the restart: transitions %+v (want one promotion, nothing decoded), %d jobs pending", moves, len(v.Jobs))
	}
}

// TestGracefulShutdown: on SIGTERM the running request finishes its
// generation, the queued one is answered 503 at once instead of being
// served, and serve exits 0 with one line about it. With a short
// --shutdown-timeout a running request is cancelled instead, and the exit
// is still 0.
func TestGracefulShutdown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout string
		finish  bool // the running request completes
	}{{"finish", "10m", true}, {"cancel", "1ns", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := startServe(t, t.TempDir(), nil, "--parallel", "1", "--shutdown-timeout", tc.timeout)
			type answer struct {
				code  int
				lines []string
				err   error
			}
			post := func(predict int, out chan<- answer) {
				body, _ := json.Marshal(map[string]any{"model": "stories260K", "prompt": "Once upon a time", "raw": true,
					"options": map[string]any{"temperature": 0, "num_predict": predict}})
				resp, err := http.Post(p.url+"/api/generate", "application/json", bytes.NewReader(body))
				if err != nil {
					out <- answer{err: err}
					return
				}
				defer resp.Body.Close()
				a := answer{code: resp.StatusCode}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					a.lines = append(a.lines, sc.Text())
				}
				out <- a
			}
			running, queued := make(chan answer, 1), make(chan answer, 1)
			go post(900, running)
			testutil.WaitFor(t, "the first request to run", func() bool { return metric(t, p, "memosrt_busy_slots") == 1 })
			go post(8, queued)
			testutil.WaitFor(t, "the second request to queue", func() bool { return metric(t, p, "memosrt_queue_depth") == 1 })
			p.cmd.Process.Signal(syscall.SIGTERM)
			q := <-queued
			if q.err != nil || q.code != http.StatusServiceUnavailable {
				t.Fatalf("queued request: %d %v %q, want 503", q.code, q.err, q.lines)
			}
			r := <-running
			last := ""
			if len(r.lines) > 0 {
				last = r.lines[len(r.lines)-1]
			}
			done := strings.Contains(last, `"done":true`) && strings.Contains(last, `"done_reason":"length"`)
			// cancelled: a 503, or the stream's last line is the error
			cancelled := (r.code == http.StatusServiceUnavailable || r.code == http.StatusOK) && strings.Contains(last, "cancelled at shutdown")
			if r.err != nil || done != tc.finish || !done && !cancelled || done && r.code != http.StatusOK {
				t.Fatalf("running request: %d %v, last line %q (want finished: %v)", r.code, r.err, last, tc.finish)
			}
			select {
			case err := <-p.done:
				if err != nil {
					t.Fatalf("serve exit: %v\n%s", err, p.stderr.String())
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("serve did not exit\n%s", p.stderr.String())
			}
			p.cmd.ProcessState = &os.ProcessState{} // stopped: Cleanup's stop is a no-op
			var after []string
			for _, l := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
				if strings.Contains(l, "stopping") || len(after) > 0 {
					after = append(after, l)
				}
			}
			if len(after) != 1 || !strings.HasPrefix(after[0], "memosrt: stopping: 1 running, 1 queued") {
				t.Fatalf("stderr after the signal: %q", after)
			}
		})
	}
}

// metric reads one unlabelled gauge from /metrics.
func metric(t *testing.T, p *serveProc, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return -1
}

// The parametric tier through `memosrt serve --parametric` on a moved
// clock: a memory used steadily (a chat every 6 hours) past the 48-hour
// horizon is distilled into the cube's adapter and ends in the parametric
// tier, out of the pack; the gate's NLL figures and the base type come
// back in the tier state; a raw prompt of its first words in the cube
// (memory not in the prompt, the adapter attached by default) completes
// it, also after a cold start (serve stopped and started again on the
// same data directory); deleting it retires the adapter within a tick.
func TestServeParametric(t *testing.T) {
	serveParametric(t, testmodels.Stories(t), "f32")
}

// The same on stories260K in q8_0, written by `memosrt quantize`: the
// tier trains on a copy with the last block dequantized, the adapter
// passes the gate measured on the q8_0 model, and the q8_0 model answers
// with it (the 172-value ffn_down rows stay f16, hence "q8_0+f16").
func TestServeParametricQuantized(t *testing.T) {
	q8 := filepath.Join(t.TempDir(), "stories260K-q8_0.gguf")
	if out := must(t, "quantize", testmodels.Stories(t), q8, "--type", "q8_0", "--threads", "1"); !strings.Contains(out, "wrote "+q8+": q8_0") {
		t.Fatalf("quantize printed %q", out)
	}
	serveParametric(t, q8, "q8_0+f16")
}

// parametricView is the parametric part of GET /v1/cubes/{cube}/tiers.
type parametricView struct {
	Adapter  string          `json:"adapter"`
	Members  int             `json:"members"`
	Failure  string          `json:"failure"`
	Eval     lora.Evaluation `json:"eval"`
	Seconds  float64         `json:"seconds"`
	Bytes    int64           `json:"bytes"`
	BaseType string          `json:"base_type"`
}

// waitParametric polls cube's tier state until its distillation attached
// an adapter or recorded a failure; 30 minutes bound a hang, not the
// speed (training runs in the background).
func waitParametric(t *testing.T, p *serveProc, cube string) parametricView {
	t.Helper()
	var v struct {
		Parametric parametricView `json:"parametric"`
	}
	for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if code := p.call(t, "GET", "/v1/cubes/"+cube+"/tiers?limit=0", nil, &v); code != http.StatusOK {
			t.Fatalf("tiers: %d", code)
		}
		if v.Parametric.Adapter != "" || v.Parametric.Failure != "" {
			return v.Parametric
		}
		if time.Now().After(deadline) {
			t.Fatalf("no distillation after 30 minutes\n%s", p.stderr.String())
		}
	}
}

// addMemory adds text to cube lily and returns its id.
func addMemory(t *testing.T, p *serveProc, text string) string {
	t.Helper()
	var m struct{ ID string }
	p.call(t, "POST", "/v1/cubes/lily/memories", map[string]string{"text": text}, &m)
	return m.ID
}

// useHot chats about memory id of cube lily steadily on the moved clock
// (3 chats, then one every 6 hours for 54 hours) so that it is hot past
// the 48-hour horizon.
func useHot(t *testing.T, p *serveProc, id, q string) {
	t.Helper()
	for range 3 {
		p.chat(t, "lily", q, false)
	}
	testutil.WaitFor(t, "the memory to enter the activation tier", func() bool { return p.tier(t, "lily", id) == scheduler.TierActivation })
	for range 9 { // 54 hours of steady use
		if code := p.call(t, "POST", "/v1/debug/clock", map[string]float64{"advance_s": 6 * 3600}, nil); code != http.StatusNoContent {
			t.Fatalf("clock: %d", code)
		}
		p.chat(t, "lily", q, false)
	}
}

func serveParametric(t *testing.T, model, baseType string) {
	db := t.TempDir()
	args := []string{"--model", model, "--debug-clock", "--tick-interval", "50ms", "--parametric", "--distill-after", "48h"}
	p := startServe(t, db, nil, args...)
	raw := func(p *serveProc) memosrt.Response {
		t.Helper()
		var r memosrt.Response
		in := map[string]any{"cube": "lily", "prompt": "Lily has a red ball named Bob that", "raw": true, "num_predict": 24, "no_cache": true, "record": "none"}
		if code := p.call(t, "POST", "/v1/generate", in, &r); code != http.StatusOK {
			t.Fatalf("generate: %d", code)
		}
		return r
	}
	const tail = " she keeps under the big green bed."
	ball := addMemory(t, p, "Lily has a red ball named Bob that she keeps under the big green bed.")
	if r := raw(p); strings.HasPrefix(r.Text, tail) || r.Adapters != "" {
		t.Fatalf("before: the base completes with %q (adapters %q)", r.Text, r.Adapters)
	}
	useHot(t, p, ball, "Where is the red ball Bob?")
	v := waitParametric(t, p, "lily")
	ev := v.Eval
	t.Logf("through serve on %s: adapter %s (%d bytes, %.1f s, base %s), memory NLL %.3f → %.3f (−%.0f%%), recalled %d/%d, generic top-1 %.1f%% KL %.4f",
		filepath.Base(model), v.Adapter, v.Bytes, v.Seconds, v.BaseType, ev.NLLBase, ev.NLLAdapter, 100*ev.NLLDrop(), ev.Recalled, ev.Memories, 100*ev.Top1, ev.KL)
	if v.Adapter == "" || ev.NLLDrop() < 0.5 || ev.Recalled != 1 || !ev.Passed || v.BaseType != baseType {
		t.Fatalf("distillation: %+v; want an adapter past the gate, base %s", v, baseType)
	}
	if got := p.tier(t, "lily", ball); got != scheduler.TierParametric {
		t.Fatalf("the ball is in the %s tier", got)
	}
	testutil.WaitFor(t, "the pack to leave the ball", func() bool { return p.tiers(t, "lily").PackID == "" })
	check := func(p *serveProc, when string) {
		t.Helper()
		if r := raw(p); !strings.HasPrefix(r.Text, tail) || r.Adapters != v.Adapter+":1" || r.Retrieved != 0 || r.PackMemories != 0 {
			t.Fatalf("%s: %q (adapters %q, %d retrieved, %d in the pack), want %q under %s",
				when, r.Text, r.Adapters, r.Retrieved, r.PackMemories, tail, v.Adapter)
		}
	}
	check(p, "after the distillation")
	p.stop(t)
	p = startServe(t, db, nil, args...)
	check(p, "after a cold start")
	if code := p.call(t, "DELETE", "/v1/cubes/lily/memories/"+ball, nil, nil); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	testutil.WaitFor(t, "the adapter to be retired", func() bool { return raw(p).Adapters == "" })
	if r := raw(p); strings.HasPrefix(r.Text, tail) {
		t.Fatalf("after the delete the cube still completes the memory: %q", r.Text)
	}
}

// A model whose weights cannot be trained is refused by the tier with a
// message naming the weight and its type, and serve keeps answering; the
// hot memory stays in the activation tier. No type the pinned ggml
// computes with is untrainable (each has a dequantizer), so the test
// replaces the model file under the running server (which keeps the
// model it loaded) with a copy whose blk.4.attn_q.weight is declared
// i32, a type ggml cannot dequantize: the tier reads the file when it
// plans the training.
func TestServeParametricUntrainable(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model.gguf")
	b, err := os.ReadFile(testmodels.Stories(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, t.TempDir(), nil, "--model", model, "--debug-clock", "--tick-interval", "50ms", "--parametric", "--distill-after", "48h")
	ball := addMemory(t, p, "Lily has a red ball named Bob that she keeps under the big green bed.")
	p.chat(t, "lily", "Once upon a time", false) // the model is loaded
	name := "blk.4.attn_q.weight"
	key := append(binary.LittleEndian.AppendUint64(nil, uint64(len(name))), name...)
	at := bytes.Index(b, key) + len(key)
	at += 4 + 8*int(binary.LittleEndian.Uint32(b[at:])) // n_dims, dims: the type follows
	binary.LittleEndian.PutUint32(b[at:], 26)           // GGML_TYPE_I32
	if err := os.WriteFile(model+".new", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(model+".new", model); err != nil {
		t.Fatal(err)
	}
	useHot(t, p, ball, "Where is the red ball Bob?")
	v := waitParametric(t, p, "lily")
	t.Logf("refused: %s", v.Failure)
	if v.Adapter != "" || !strings.Contains(v.Failure, "blk.4.attn_q.weight is i32") {
		t.Fatalf("parametric state %+v; want the failure naming blk.4.attn_q.weight and i32", v)
	}
	if got := p.tier(t, "lily", ball); got != scheduler.TierActivation {
		t.Fatalf("the refused memory is in the %s tier, want activation", got)
	}
	if r := p.chat(t, "lily", "Where is the red ball Bob?", false); r.Text == "" {
		t.Fatal("serve answered nothing after the refusal")
	}
	if n := strings.Count(p.stderr.String(), "this model cannot be trained"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, p.stderr.String())
	}
}

// kv ls names each pack's cube, "(no cube)" for a chat without one, and
// its kind: a conversation pack is labelled "conv:<cube>" in the store,
// and that label is not a cube.
func TestKVLsConversationPacks(t *testing.T) {
	db := t.TempDir()
	p := startServe(t, db, nil)
	must(t, "mem", "add", "--db", db, "--cube", "lily", "Lily has a dog named Max.")
	must(t, "kv", "warm", "--db", db, "--cube", "lily")
	p.chat(t, "lily", "Where does the dog Max run?", false)
	p.chat(t, "", "Once upon a time", false)
	testutil.WaitFor(t, "two conversation packs", func() bool {
		var r struct{ Packs []struct{ Label string } }
		p.call(t, "GET", "/v1/packs", nil, &r)
		n := 0
		for _, k := range r.Packs {
			if strings.HasPrefix(k.Label, "conv:") {
				n++
			}
		}
		return n == 2
	})
	p.stop(t)
	// cube and kind of each row, read at the header's column offsets
	rows := func(out string) []string {
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		h := lines[0]
		c, k, n := strings.Index(h, "CUBE"), strings.Index(h, "KIND"), strings.Index(h, "TOKENS")
		var got []string
		for _, l := range lines[1:] {
			got = append(got, strings.TrimSpace(l[c:k])+" | "+strings.TrimSpace(l[k:n]))
		}
		slices.Sort(got)
		return got
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"all", nil, []string{"(no cube) | conversation", "lily | conversation", "lily | memories"}},
		{"cube", []string{"--cube", "lily"}, []string{"lily | conversation", "lily | memories"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := must(t, append([]string{"kv", "ls", "--db", db}, tc.args...)...)
			if got := rows(out); !slices.Equal(got, tc.want) {
				t.Fatalf("kv ls %v: rows %q, want %q\n%s", tc.args, got, tc.want, out)
			}
		})
	}
}

// `run --model X` on the directory of a serve that serves X goes through
// the server with that model, saying nothing; a --model the server does
// not serve is not loaded either, and stderr says which model answers.
func TestRunModelNextToServer(t *testing.T) {
	db := t.TempDir()
	p := startServe(t, db, nil)
	var tags struct{ Models []struct{ Name string } }
	if code := p.call(t, "GET", "/api/tags", nil, &tags); code != http.StatusOK || len(tags.Models) != 1 {
		t.Fatalf("tags: %d %+v", code, tags)
	}
	primary := tags.Models[0].Name
	// the same file under another path (a link) is the same model
	same := filepath.Join(t.TempDir(), "same.gguf")
	if err := os.Symlink(testmodels.Stories(t), same); err != nil {
		t.Fatal(err)
	}
	other := testmodels.Path(t, "ggml-vocab-llama-spm.gguf")
	run := func(model string) (runJSON, string) {
		t.Helper()
		cmd := exec.Command(binPath, "run", "--db", db, "--model", model, "--num-predict", "8", "--json", "Once upon a time")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run --model %s: %v\n%s%s", model, err, stdout.String(), stderr.String())
		}
		var r runJSON
		if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
			t.Fatalf("run --model %s: bad JSON %q: %v", model, stdout.String(), err)
		}
		return r, stderr.String()
	}
	want := runJSONOut(t, "run", "--db", db, "--num-predict", "8", "--json", "Once upon a time")
	for _, tc := range []struct{ name, model, stderr string }{
		{"served", testmodels.Stories(t), ""},
		{"served-link", same, ""},
		{"not-served", other, "memosrt: the memosrt serve running on " + db + " does not serve --model " + other +
			"; its model " + primary + " answers (--model is not loaded)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, stderr := run(tc.model)
			if got.Response != want.Response || got.Response == "" || stderr != tc.stderr {
				t.Fatalf("run --model %s: %q, stderr %q; want %q, stderr %q", tc.model, got.Response, stderr, want.Response, tc.stderr)
			}
		})
	}
	// POST /v1/generate names its model: one the server does not serve is a 404
	if code := p.call(t, "POST", "/v1/generate", map[string]any{"model": "no-such-model", "prompt": "hi", "num_predict": 1}, nil); code != http.StatusNotFound {
		t.Fatalf("generate with an unknown model: %d, want 404", code)
	}
}
