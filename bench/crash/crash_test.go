package crash

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/internal/testutil"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

var binPath string

// TestMain builds the memosrt binary once for the tests.
func TestMain(m *testing.M) { testutil.RunWithMemosrt(m, &binPath) }

// Raw key prefixes of kvcache (kvcache/cache.go): pack headers and blob chunks.
const (
	keyPackHeader = "k/h/"
	keyPackChunk  = "k/b/"
)

const workers = 4

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestCrashRecovery(t *testing.T) {
	cycles := envInt(t, "MEMOSRT_CRASH_CYCLES", 100)
	if testing.Short() && os.Getenv("MEMOSRT_CRASH_CYCLES") == "" {
		cycles = 10
	}
	seed := uint64(envInt(t, "MEMOSRT_CRASH_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("MEMOSRT_CRASH_SEED=%d MEMOSRT_CRASH_CYCLES=%d", seed, cycles)
	t.Run("plain", func(t *testing.T) { runHarness(t, seed, cycles, "") })
	// an encrypted directory recovers the same way (Badger's key registry,
	// encrypted WAL and tables); fewer cycles
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte(strings.Repeat("5a", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("encrypted", func(t *testing.T) { runHarness(t, seed+1, max(cycles/5, 2), key) })
}

// stats are the harness's counters, logged at the end.
type stats struct {
	acked         int // acknowledged writes
	byKind        [len(opNames)]int
	lost          int // acknowledged writes missing after a restart
	pendingDone   int // unacknowledged writes found applied after a restart
	pendingUndone int // unacknowledged writes found not applied
	earlyKills    int // kills during start-up
	rawChecks     int
	packs         int
}

func runHarness(t *testing.T, seed uint64, cycles int, keyFile string) {
	model := testmodels.Stories(t)
	db := t.TempDir()
	rng := rand.New(rand.NewPCG(seed, 0xc0ffee))
	ws := make([]*worker, workers)
	for i := range ws {
		ws[i] = &worker{id: i, cube: fmt.Sprintf("crash%d", i), mem: map[string]string{},
			rng: rand.New(rand.NewPCG(seed, uint64(i)))}
	}
	var st stats
	start := time.Now()
	prev := "" // the stderr of the server killed last (what it did before the kill)
	for cycle := 0; cycle < cycles && !t.Failed(); cycle++ {
		p := startServer(t, db, model, keyFile)
		if rng.IntN(7) == 0 {
			// kill during start-up: recovery, orphan removal, model load
			time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond) // the kill moment, not a synchronisation
			p.kill(t)
			st.earlyKills++
			continue
		}
		if err := p.waitListening(); err != nil {
			t.Fatalf("cycle %d: %v\n%s", cycle, err, p.stderr.String())
		}
		c := &client{base: "http://" + p.addr, hc: &http.Client{Timeout: 60 * time.Second}}
		for _, w := range ws {
			w.reconcileMemories(t, cycle, c, &st)
		}
		if err := p.waitReady(); err != nil {
			t.Fatalf("cycle %d: %v\n%s", cycle, err, p.stderr.String())
		}
		for _, w := range ws {
			w.reconcilePacks(t, cycle, c, &st)
		}
		if t.Failed() {
			t.Fatalf("cycle %d: server stderr:\n%s\nthe server before it:\n%s", cycle, p.stderr.String(), prev)
		}
		// load, then SIGKILL after a random number of acknowledgements
		ctx, cancel := context.WithCancel(context.Background())
		acks := make(chan struct{}, 1024)
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() { w.load(ctx, t, c, acks) })
		}
		stopped := make(chan struct{}) // every worker gave up (a failure)
		go func() { wg.Wait(); close(stopped) }()
		want := 1 + rng.IntN(48)
	wait:
		for range want {
			select {
			case <-acks:
			case <-p.exited:
				break wait
			case <-stopped:
				break wait
			}
		}
		time.Sleep(time.Duration(rng.IntN(8000)) * time.Microsecond) // vary the kill moment inside the next requests
		p.kill(t)
		cancel()
		wg.Wait()
		prev = p.stderr.String()
		c.hc.CloseIdleConnections()
		for _, w := range ws {
			for k, n := range w.acked {
				st.acked += n
				st.byKind[k] += n
			}
			w.acked = [len(opNames)]int{}
		}
		if cycle%2 == 1 {
			rawCheck(t, cycle, db, keyFile, ws, &st)
		}
	}
	// a clean restart at the end reconciles the last cycle too
	p := startServer(t, db, model, keyFile)
	if err := p.waitReady(); err != nil {
		t.Fatalf("final start: %v\n%s", err, p.stderr.String())
	}
	c := &client{base: "http://" + p.addr, hc: &http.Client{Timeout: 60 * time.Second}}
	for _, w := range ws {
		w.reconcileMemories(t, cycles, c, &st)
		w.reconcilePacks(t, cycles, c, &st)
	}
	checkTheChecker(t, c, ws)
	p.kill(t)
	rawCheck(t, cycles, db, keyFile, ws, &st)
	var kinds []string
	for k, n := range st.byKind {
		kinds = append(kinds, fmt.Sprintf("%s %d", opNames[k], n))
	}
	t.Logf("%d cycles in %s (%d killed during start-up): %d acknowledged writes (%s), %d lost; unacknowledged at the kill: %d applied, %d not; %d raw checks, %d packs at the end",
		cycles, time.Since(start).Round(time.Second), st.earlyKills, st.acked, strings.Join(kinds, ", "), st.lost, st.pendingDone, st.pendingUndone, st.rawChecks, st.packs)
	if st.lost != 0 {
		t.Errorf("%d acknowledged writes lost", st.lost)
	}
}

// recorder collects the errors reported to it.
type recorder struct {
	testing.TB
	msgs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// checkTheChecker shows that reconciliation reports a loss: against the
// live server it reconciles a copy of a worker's model holding a forged
// acknowledged memory, an acknowledged text the server does not hold and a
// forged acknowledged pack.
func checkTheChecker(t *testing.T, c *client, ws []*worker) {
	w := ws[0]
	ctx := context.Background()
	for _, o := range []op{{kind: opCreate}, {kind: opAdd, text: w.text()}, {kind: opWarm}} {
		if err := w.apply(ctx, c, &o); err != nil {
			t.Fatal(err)
		}
	}
	f := *w
	f.mem, f.pending = maps.Clone(w.mem), nil
	f.mem["ffffffffffffffffffffffff"] = "forged"
	f.mem[w.anyID()] = "not what was written"
	f.pack, f.packSure = strings.Repeat("f", 64), true
	rec := &recorder{TB: t}
	var st stats
	f.reconcileMemories(rec, -1, c, &st)
	f.reconcilePacks(rec, -1, c, &st)
	if st.lost != 3 || len(rec.msgs) != 3 {
		t.Fatalf("the checker reported %d losses for 3 forged ones:\n%s", st.lost, strings.Join(rec.msgs, "\n"))
	}
}

// server is one `memosrt serve` process.
type server struct {
	cmd       *exec.Cmd
	addr      string
	stderr    *lockedBuffer
	listening chan string   // receives the address once
	ready     chan struct{} // closed when the engine is attached
	exited    chan struct{} // closed when the process has exited
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startServer(t *testing.T, db, model, keyFile string) *server {
	t.Helper()
	// ticks every 20 ms: tier jobs (promotions of chatted memories, pack
	// refreshes after updates and deletes) run while the kill comes
	args := []string{"serve", "--db", db, "--model", model, "--addr", "127.0.0.1:0", "--parallel", "2", "--ctx", "512",
		"--threads", "1", "--ngl", "0", "--tick-interval", "20ms"}
	if keyFile != "" {
		args = append(args, "--encrypt-key-file", keyFile)
	}
	cmd := exec.Command(binPath, args...)
	testutil.DieWithParent(cmd)
	cmd.Env = append(os.Environ(), "MEMOSRT_LOG="+envOr("MEMOSRT_CRASH_LOG", "warn"))
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stderr: &lockedBuffer{}, listening: make(chan string, 1), ready: make(chan struct{}),
		exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(s.stderr, line)
			// "memosrt: ready on http://ADDR (...)" once it listens and serves
			if strings.HasPrefix(line, "memosrt: ready on ") {
				s.listening <- httpAddr(line)
				close(s.ready)
			}
		}
		io.Copy(io.Discard, pr)
		cmd.Wait()
		close(s.exited)
	}()
	return s
}

// httpAddr returns the host:port of the first http:// URL in line.
func httpAddr(line string) string {
	_, rest, _ := strings.Cut(line, "http://")
	addr, _, _ := strings.Cut(rest, " ")
	return addr
}

func (s *server) waitListening() error {
	if s.addr != "" {
		return nil
	}
	select {
	case s.addr = <-s.listening:
		return nil
	case <-s.exited:
		return fmt.Errorf("memosrt serve exited before listening: %v", s.cmd.ProcessState)
	case <-time.After(2 * time.Minute):
		return errors.New("memosrt serve not listening after 2 minutes")
	}
}

func (s *server) waitReady() error {
	if err := s.waitListening(); err != nil {
		return err
	}
	select {
	case <-s.ready:
		return nil
	case <-s.exited:
		return fmt.Errorf("memosrt serve exited before ready: %v", s.cmd.ProcessState)
	case <-time.After(2 * time.Minute):
		return errors.New("memosrt serve not ready after 2 minutes")
	}
}

// kill sends SIGKILL and waits for the process to be gone. A process that
// had exited by itself (a crash, a panic) fails the test.
func (s *server) kill(t *testing.T) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("memosrt serve exited by itself (%v):\n%s", s.cmd.ProcessState, s.stderr.String())
	default:
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
	if out := s.stderr.String(); strings.Contains(out, "panic:") || strings.Contains(out, "fatal error:") {
		t.Fatalf("memosrt serve crashed by itself:\n%s", out)
	}
}

// client speaks the memory API.
type client struct {
	base string
	hc   *http.Client
}

// do sends a request and reads the whole answer: a *string out receives
// the body, any other out the decoded JSON of a 2xx answer. It returns the
// status, or an error: a transport error when no complete answer arrived
// (the write is not acknowledged), an *answerError for a complete answer
// that is not JSON of the expected shape.
func (c *client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if s, ok := out.(*string); ok {
		*s = string(b)
		return resp.StatusCode, nil
	}
	if resp.StatusCode/100 == 2 && out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return 0, &answerError{resp.StatusCode, fmt.Sprintf("%q: %v", b, err)}
		}
	}
	return resp.StatusCode, nil
}

type opKind int

const (
	opCreate opKind = iota
	opAdd
	opUpdate
	opDelete
	opWarm
	opDeleteCube
	opChat // not a write: a chat turn whose retrieval heats memories (tier jobs follow)
)

var opNames = [...]string{"create", "add", "update", "delete", "warm", "delete-cube", "chat"}

// op is a write whose answer has not been read (yet).
type op struct {
	kind opKind
	id   string // update, delete
	text string // add, update
}

func (o *op) String() string {
	if o == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s %.40q", opNames[o.kind], o.id, o.text)
}

// worker writes to one cube and keeps the model of what is acknowledged.
type worker struct {
	id      int
	cube    string
	rng     *rand.Rand
	created bool
	mem     map[string]string // acknowledged memories: id → text
	// pack is the tier pack the last acknowledged warm reported; packSure
	// while no later write could have changed it (an update or delete of a
	// member recomputes the pack at a tick)
	pack     string
	packSure bool
	pending  *op // the write in flight at the kill, if any
	seq      int
	acked    [len(opNames)]int // by opKind, this cycle
}

var words = strings.Fields(`apple river garden lantern violin harbor meadow pepper candle
	marble orchard thunder velvet compass glacier saddle whistle ember quarry falcon
	biscuit canyon dolphin feather granite hammock island jasmine kettle lemon mango
	nectar oyster parsley quilt raven salmon tulip umbrella walnut yarrow zephyr
	anchor blossom cobalt dune echo fjord grove hazel ivory juniper kelp lilac moss`)

var unicodeTails = []string{"东京的猫喜欢鱼", "ねこはさかながすき", "고양이는 생선을 좋아해", "🐈‍⬛ 🍣 🎉", "café naïve façade", "Ελληνικά και Русский"}

// text returns a fresh memory text: a unique term first (w<worker>t<seq>),
// then random words, sometimes non-ASCII.
func (w *worker) text() string {
	w.seq++
	var b strings.Builder
	fmt.Fprintf(&b, "w%dt%d", w.id, w.seq)
	for range 6 + w.rng.IntN(14) {
		b.WriteString(" ")
		b.WriteString(words[w.rng.IntN(len(words))])
	}
	if w.rng.IntN(4) == 0 {
		b.WriteString(" ")
		b.WriteString(unicodeTails[w.rng.IntN(len(unicodeTails))])
	}
	return b.String()
}

func (w *worker) anyID() string {
	ids := make([]string, 0, len(w.mem))
	for id := range w.mem {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids[w.rng.IntN(len(ids))]
}

// next draws the worker's next operation: create first, then 40% adds
// (always an add while the cube holds no memory), 20% updates, 12%
// deletes, 12% chats about a memory, 14% warms, 2% cube deletes.
func (w *worker) next() op {
	switch r := w.rng.IntN(100); {
	case !w.created:
		return op{kind: opCreate}
	case r < 40 || len(w.mem) == 0:
		return op{kind: opAdd, text: w.text()}
	case r < 60:
		return op{kind: opUpdate, id: w.anyID(), text: w.text()}
	case r < 72:
		return op{kind: opDelete, id: w.anyID()}
	case r < 84:
		return op{kind: opChat, text: w.mem[w.anyID()]}
	case r < 98:
		return op{kind: opWarm}
	default:
		return op{kind: opDeleteCube}
	}
}

// load writes until ctx ends or the server stops answering, sending one
// value on acks per acknowledged write.
func (w *worker) load(ctx context.Context, t *testing.T, c *client, acks chan<- struct{}) {
	for ctx.Err() == nil {
		o := w.next()
		if o.kind != opChat {
			w.pending = &o
		}
		if err := w.apply(ctx, c, &o); err != nil {
			if ctx.Err() == nil && !isTransport(err) {
				t.Errorf("%s: %s: %v", w.cube, &o, err)
			}
			return // unacknowledged: stays pending
		}
		w.pending = nil
		w.acked[o.kind]++
		select {
		case acks <- struct{}{}:
		default:
		}
	}
}

// isTransport reports an error of the connection (the server was killed),
// as opposed to a wrong answer.
func isTransport(err error) bool {
	var ae *answerError
	return !errors.As(err, &ae)
}

type answerError struct {
	status int
	body   string
}

func (e *answerError) Error() string { return fmt.Sprintf("answer %d: %s", e.status, e.body) }

func (w *worker) apply(ctx context.Context, c *client, o *op) error {
	base := "/v1/cubes/" + w.cube
	var body string
	switch o.kind {
	case opCreate:
		code, err := c.do(ctx, "POST", "/v1/cubes", map[string]string{"name": w.cube}, &body)
		if err != nil {
			return err
		}
		if code != http.StatusCreated && code != http.StatusConflict {
			return &answerError{code, body}
		}
		w.created = true
	case opAdd:
		var m textmem.Memory
		code, err := c.do(ctx, "POST", base+"/memories", map[string]string{"text": o.text}, &m)
		if err != nil {
			return err
		}
		if code != http.StatusCreated || m.ID == "" || m.Cube != w.cube || m.Text != o.text {
			return &answerError{code, fmt.Sprintf("%+v", m)}
		}
		if _, merged := w.mem[m.ID]; merged {
			w.packSure = false // a near-duplicate merge changed a member's text: a refresh follows
		}
		w.mem[m.ID] = m.Text // a near-duplicate merge returns an existing id
	case opUpdate:
		var m textmem.Memory
		code, err := c.do(ctx, "PUT", base+"/memories/"+o.id, map[string]string{"text": o.text}, &m)
		if err != nil {
			return err
		}
		if code != http.StatusOK || m.ID != o.id || m.Text != o.text {
			return &answerError{code, fmt.Sprintf("%+v", m)}
		}
		w.mem[o.id] = o.text
	case opDelete:
		code, err := c.do(ctx, "DELETE", base+"/memories/"+o.id, nil, &body)
		if err != nil {
			return err
		}
		if code != http.StatusNoContent {
			return &answerError{code, body}
		}
		delete(w.mem, o.id)
	case opWarm:
		var st struct {
			Packs []struct {
				ID    string `json:"id"`
				Label string `json:"label"`
			} `json:"packs"`
		}
		code, err := c.do(ctx, "POST", base+"/pack", nil, &st)
		for code == http.StatusTooManyRequests && err == nil && ctx.Err() == nil {
			// more warms waiting than the scheduler queues: shed, as a
			// client would, retry after a moment (Retry-After)
			time.Sleep(50 * time.Millisecond)
			code, err = c.do(ctx, "POST", base+"/pack", nil, &st)
		}
		if err != nil {
			return err
		}
		if code != http.StatusOK || len(st.Packs) == 0 {
			return &answerError{code, fmt.Sprintf("%+v", st)}
		}
		var tiers struct {
			PackID string `json:"pack_id"`
		}
		for _, p := range st.Packs {
			if p.Label != w.cube && p.Label != "conv:"+w.cube {
				return &answerError{code, fmt.Sprintf("pack %s of %q listed in cube %s", p.ID, p.Label, w.cube)}
			}
		}
		// the warm committed the tier state: its pack is the one to keep
		if code, err := c.do(ctx, "GET", base+"/tiers?limit=1", nil, &tiers); err != nil {
			return err
		} else if code != http.StatusOK || tiers.PackID == "" {
			return &answerError{code, fmt.Sprintf("tiers after a warm: %+v", tiers)}
		}
		w.pack, w.packSure = tiers.PackID, true
	case opChat:
		// the memory's own words retrieve it: a visit and an interaction
		req := map[string]any{"model": "stories260K", "stream": false, "options": map[string]any{"cube": w.cube, "num_predict": 2},
			"messages": []map[string]string{{"role": "user", "content": o.text}}}
		code, err := c.do(ctx, "POST", "/api/chat", req, &body)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return &answerError{code, body}
		}
	case opDeleteCube:
		code, err := c.do(ctx, "DELETE", base, nil, &body)
		if err != nil {
			return err
		}
		if code != http.StatusNoContent {
			return &answerError{code, body}
		}
		w.created = false
		clear(w.mem)
		w.pack, w.packSure = "", false
	}
	if o.kind == opUpdate || o.kind == opDelete || o.kind == opChat {
		w.packSure = false // a tick may recompute the pack (a changed member, a hot one)
	}
	return nil
}

// reconcileMemories compares the cube's memories with the model: the
// acknowledged state, give or take the pending write. What the pending write
// did is adopted.
func (w *worker) reconcileMemories(t testing.TB, cycle int, c *client, st *stats) {
	t.Helper()
	ctx := context.Background()
	var list struct {
		Memories []textmem.Memory `json:"memories"`
	}
	var body string
	code, err := c.do(ctx, "GET", "/v1/cubes/"+w.cube+"/memories", nil, &list)
	if err != nil {
		t.Fatalf("cycle %d: list %s: %v", cycle, w.cube, err)
	}
	p := w.pending
	if code == http.StatusNotFound {
		switch {
		case !w.created:
		case p != nil && p.kind == opDeleteCube:
			w.created = false
			clear(w.mem)
			w.pack, w.packSure = "", false
			st.pendingDone++
		default:
			t.Errorf("cycle %d: cube %s is gone (acknowledged: %d memories, pending %s)", cycle, w.cube, len(w.mem), p)
			st.lost += len(w.mem) + 1
		}
		w.pending = nil
		return
	}
	if code != http.StatusOK {
		c.do(ctx, "GET", "/v1/cubes/"+w.cube+"/memories", nil, &body)
		t.Fatalf("cycle %d: list %s: %d %s", cycle, w.cube, code, body)
	}
	if !w.created {
		if p == nil || p.kind != opCreate {
			t.Errorf("cycle %d: cube %s exists without an acknowledged create (pending %s)", cycle, w.cube, p)
		}
		w.created = true
	}
	got := map[string]string{}
	for _, m := range list.Memories {
		if m.Kind == memosrt.KindTurn {
			continue // the server's own record of chat turns (issue 17), not a write of this worker
		}
		if m.Cube != w.cube {
			t.Errorf("cycle %d: cube %s lists memory %s of cube %q", cycle, w.cube, m.ID, m.Cube)
		}
		got[m.ID] = m.Text
	}
	applied := false
	for id, want := range w.mem {
		have, ok := got[id]
		switch {
		case ok && have == want:
		case !ok && p != nil && (p.kind == opDeleteCube || p.kind == opDelete && p.id == id):
			applied = true
		case ok && p != nil && have == p.text && (p.kind == opUpdate && p.id == id || p.kind == opAdd):
			applied = true // an update, or an add merged into a near duplicate
		case !ok:
			t.Errorf("cycle %d: LOST: cube %s memory %s %.60q (pending %s)", cycle, w.cube, id, want, p)
			st.lost++
		default:
			t.Errorf("cycle %d: cube %s memory %s holds %.60q, acknowledged %.60q (pending %s)", cycle, w.cube, id, have, want, p)
			st.lost++
		}
	}
	for id, have := range got {
		if _, ok := w.mem[id]; ok {
			continue
		}
		if p != nil && p.kind == opAdd && have == p.text && !applied {
			applied = true
			continue
		}
		t.Errorf("cycle %d: cube %s shows memory %s %.60q that was never acknowledged (pending %s)", cycle, w.cube, id, have, p)
	}
	if p != nil && p.kind != opWarm && p.kind != opCreate {
		if applied {
			st.pendingDone++
		} else {
			st.pendingUndone++
		}
	}
	w.mem = got
}

// reconcilePacks checks the cube's activation tier after a restart: the
// tier state's pack is stored (never a dangling reference), no other tier
// pack of the cube is left (a job or warm cut short leaves its pack
// uncommitted; the next start removes it), and the pack of the last
// acknowledged warm is still the tier's unless a later write changed it.
func (w *worker) reconcilePacks(t testing.TB, cycle int, c *client, st *stats) {
	t.Helper()
	p := w.pending
	w.pending = nil
	if !w.created {
		return
	}
	type packList struct {
		Packs []struct {
			ID    string `json:"id"`
			Label string `json:"label"`
		} `json:"packs"`
	}
	type tierState struct {
		PackID string            `json:"pack_id"`
		Jobs   []json.RawMessage `json:"jobs"`
	}
	ctx := context.Background()
	readTiers := func() tierState {
		var ts tierState
		if code, err := c.do(ctx, "GET", "/v1/cubes/"+w.cube+"/tiers?limit=1", nil, &ts); err != nil || code != http.StatusOK {
			t.Fatalf("cycle %d: tiers %s: %d %v", cycle, w.cube, code, err)
		}
		return ts
	}
	// The server's scheduler runs while this reads: a job resumed at the
	// start may store its pack, commit it and delete the old one between
	// two reads. So the pack list is read between two equal tier states,
	// and a state that fails the checks is read again for up to 10 s: a
	// pack is left behind (or lost) only if it stays so once the jobs are
	// done; the window between a commit and its old pack's deletion is not.
	var (
		tiers       tierState
		listed      bool
		uncommitted int
		deadline    = time.Now().Add(10 * time.Second)
	)
	for {
		before := readTiers()
		var status packList
		code, err := c.do(ctx, "GET", "/v1/cubes/"+w.cube+"/pack", nil, &status)
		if err != nil || code != http.StatusOK {
			t.Fatalf("cycle %d: pack status %s: %d %v", cycle, w.cube, code, err)
		}
		tiers = readTiers()
		listed, uncommitted = false, 0
		for _, pk := range status.Packs {
			switch {
			case pk.ID == tiers.PackID:
				listed = true
			case pk.Label == w.cube:
				uncommitted++
			}
		}
		// a pending job may have stored its pack before the kill: it
		// commits it when it runs again; any other uncommitted pack was
		// left behind
		stable := before.PackID == tiers.PackID && len(before.Jobs) == len(tiers.Jobs)
		ok := uncommitted <= len(tiers.Jobs) && (tiers.PackID == "" || listed)
		if stable && ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if uncommitted > len(tiers.Jobs) {
		t.Errorf("cycle %d: cube %s keeps %d packs that no tier state refers to, %d jobs pending (tier pack %.12s, pending %s)",
			cycle, w.cube, uncommitted, len(tiers.Jobs), tiers.PackID, p)
	}
	if tiers.PackID != "" && !listed {
		t.Errorf("cycle %d: LOST: cube %s's tier state refers to pack %.12s, which is not stored (pending %s)", cycle, w.cube, tiers.PackID, p)
		st.lost++
	}
	if w.packSure && tiers.PackID != w.pack && (p == nil || p.kind != opWarm && p.kind != opUpdate && p.kind != opDelete && p.kind != opDeleteCube) {
		var trs map[string]any
		c.do(ctx, "GET", "/v1/cubes/"+w.cube+"/tiers?limit=8", nil, &trs)
		t.Errorf("cycle %d: LOST: cube %s's warmed pack %.12s is gone (tier pack %.12s, pending %s); tiers %v", cycle, w.cube, w.pack, tiers.PackID, p, trs)
		st.lost++
	}
	if p != nil && p.kind == opWarm {
		if tiers.PackID != "" && tiers.PackID != w.pack {
			st.pendingDone++
		} else {
			st.pendingUndone++
		}
	}
	// a pending write that may have been applied (an update, a delete, an
	// add merged into a member) changes the pack at a later tick
	sure := w.packSure && tiers.PackID == w.pack && (p == nil || p.kind == opWarm || p.kind == opCreate)
	w.pack, w.packSure = tiers.PackID, sure
}

// readKeyFile is the encryption key in keyFile (hex, as serve's
// --encrypt-key-file takes it); nil for "".
func readKeyFile(t *testing.T, keyFile string) []byte {
	t.Helper()
	if keyFile == "" {
		return nil
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// rawCheck opens the directory in this process (recovering it) and checks
// the activation tier's index against its blobs and the text tier's records
// against its index.
func rawCheck(t *testing.T, cycle int, dir, keyFile string, ws []*worker, st *stats) {
	t.Helper()
	st.rawChecks++
	key := readKeyFile(t, keyFile)
	db, err := datadir.Open(datadir.Options{Dir: dir, EncryptionKey: key})
	if err != nil {
		t.Fatalf("cycle %d: reopen after kill: %v", cycle, err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("cycle %d: close: %v", cycle, err)
		}
	}()
	kv, err := kvcache.Open(db, kvcache.Options{RAMBytes: 1})
	if err != nil {
		t.Fatalf("cycle %d: kvcache open: %v", cycle, err)
	}
	defer kv.Close()
	packs := kv.List("")
	st.packs = len(packs)
	listed := map[string]bool{}
	for _, info := range packs {
		listed[info.ID] = true
		blob, err := kv.Blob(info.ID)
		if err == nil {
			_, _, err = kvcache.Decode(blob)
		}
		if err != nil {
			t.Errorf("cycle %d: pack %.12s (cube %s) is listed but its blob is not whole: %v", cycle, info.ID, info.Label, err)
		}
		if !slices.ContainsFunc(ws, func(w *worker) bool { return w.cube == info.Label || "conv:"+w.cube == info.Label }) {
			t.Errorf("cycle %d: pack %.12s has label %q", cycle, info.ID, info.Label)
		}
	}
	var headers int
	err = db.Badger().View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte("k/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := string(it.Item().Key())
			switch {
			case strings.HasPrefix(k, keyPackHeader):
				headers++
			case strings.HasPrefix(k, keyPackChunk):
				if id, _, _ := strings.Cut(k[len(keyPackChunk):], "/"); !listed[id] {
					t.Errorf("cycle %d: orphan blob chunk %q after kvcache.Open", cycle, k)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if headers != len(packs) {
		t.Errorf("cycle %d: %d pack headers, %d packs listed", cycle, headers, len(packs))
	}
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	ctx := context.Background()
	for _, w := range ws {
		list, err := mem.List(ctx, w.cube)
		if err != nil {
			t.Fatalf("cycle %d: list %s: %v", cycle, w.cube, err)
		}
		for _, m := range list {
			if m.Kind == memosrt.KindTurn {
				continue // a recorded chat turn: it names other memories' terms
			}
			term, _, _ := strings.Cut(m.Text, " ")
			// k covers the whole cube: recorded turns quoting the term may
			// rank above the memory itself
			hits, err := mem.Search(ctx, w.cube, term, max(len(list), 3))
			hits = slices.DeleteFunc(hits, func(h textmem.Hit) bool { return h.Memory.Kind == memosrt.KindTurn })
			if err != nil || len(hits) != 1 || hits[0].Memory.ID != m.ID || hits[0].Memory.Text != m.Text {
				t.Errorf("cycle %d: search %s for %q: %d hits, %v (want memory %s)", cycle, w.cube, term, len(hits), err, m.ID)
			}
			for _, o := range ws {
				if o == w {
					continue
				}
				hits, _ := mem.Search(ctx, o.cube, term, 3)
				if hits = slices.DeleteFunc(hits, func(h textmem.Hit) bool { return h.Memory.Kind == memosrt.KindTurn }); len(hits) != 0 {
					t.Errorf("cycle %d: cube %s finds %s's memory %s", cycle, o.cube, w.cube, m.ID)
				}
			}
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
