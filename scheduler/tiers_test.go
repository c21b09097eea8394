package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// tierEnv is one "process": database, stores, runner and tiers over a
// shared engine; restart closes and reopens all but the engine.
type tierEnv struct {
	t       *testing.T
	dir     string
	eng     *runtime.Engine
	clock   *fakeClock
	db      *badger.DB
	mem     *textmem.Store
	kv      *kvcache.Cache
	r       *Runner
	tiers   *Tiers
	opts    TierOptions
	alias   map[string]string // memory id → m1, m2, ...
	ids     map[string]string // m1 → id
	crashes int               // jobs to fail after their pack is stored
}

func loadEngine(t testing.TB, nseq int) *runtime.Engine {
	t.Helper()
	eng, err := runtime.Load(context.Background(), runtime.Options{ModelPath: testmodels.Stories(t), NCtx: 1024, NSeqMax: nseq, Threads: 1, LoRA: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

func newTierEnv(t *testing.T) *tierEnv {
	e := &tierEnv{t: t, dir: t.TempDir(), eng: loadEngine(t, 2), clock: &fakeClock{t: epoch},
		alias: map[string]string{}, ids: map[string]string{}}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *tierEnv) open() {
	t := e.t
	var err error
	if e.db, err = badger.Open(badger.Options{Dir: e.dir, NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if e.mem, err = textmem.Open(e.db, textmem.Options{Now: e.clock.Now}); err != nil {
		t.Fatal(err)
	}
	if e.kv, err = kvcache.Open(e.db, kvcache.Options{Now: e.clock.Now}); err != nil {
		t.Fatal(err)
	}
	e.r = New(e.eng, e.mem, e.kv, Options{})
	opts := e.opts
	opts.Clock = e.clock
	opts.afterPut = func(Job) error {
		if e.crashes > 0 {
			e.crashes--
			return errors.New("simulated crash")
		}
		return nil
	}
	if e.tiers, err = NewTiers(e.db, e.r, opts); err != nil {
		t.Fatal(err)
	}
}

func (e *tierEnv) close() {
	if e.db == nil {
		return
	}
	for _, err := range []error{e.tiers.Close(), e.kv.Close(), e.mem.Close(), e.db.Close()} {
		if err != nil {
			e.t.Error(err)
		}
	}
	e.db = nil
}

func (e *tierEnv) name(id string) string {
	if a, ok := e.alias[id]; ok {
		return a
	}
	return id
}

func arg(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func (e *tierEnv) cmd(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	cube := arg(d, "cube", "c")
	var b strings.Builder
	switch d.Cmd {
	case "add":
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			m, err := e.mem.Add(ctx, cube, textmem.Memory{Text: line})
			if err != nil {
				return err.Error()
			}
			a := fmt.Sprintf("m%d", len(e.alias)+1)
			e.alias[m.ID], e.ids[a] = a, m.ID
			fmt.Fprintf(&b, "%s: %s\n", a, line)
			e.clock.Advance(time.Second)
		}
	case "search":
		var times int
		fmt.Sscan(arg(d, "times", "1"), &times)
		for range times {
			hits, err := e.tiers.Search(ctx, cube, arg(d, "query", ""), 3)
			if err != nil {
				return err.Error()
			}
			var names []string
			for _, h := range hits {
				names = append(names, e.name(h.Memory.ID))
			}
			fmt.Fprintf(&b, "hits: %s\n", strings.Join(names, " "))
		}
	case "advance":
		dur, err := time.ParseDuration(arg(d, "by", "0s"))
		if err != nil {
			return err.Error()
		}
		e.clock.Advance(dur)
		fmt.Fprintf(&b, "now +%s\n", e.clock.Now().Sub(epoch))
	case "tick":
		rep, err := e.tiers.Tick(ctx)
		fmt.Fprintf(&b, "planned=%d done=%d failed=%d\n", rep.Planned, rep.Done, rep.Failed)
		if err != nil {
			msg := err.Error()
			for id, a := range e.alias {
				msg = strings.ReplaceAll(msg, id, a)
			}
			fmt.Fprintf(&b, "error: %s\n", msg)
		}
	case "state":
		st, err := e.tiers.State(ctx, cube, 0)
		if err != nil {
			return err.Error()
		}
		mems := slices.Clone(st.Memories)
		slices.SortFunc(mems, func(a, b MemoryTier) int { return strings.Compare(e.name(a.ID), e.name(b.ID)) })
		for _, m := range mems {
			fmt.Fprintf(&b, "%s %s heat=%.3f\n", e.name(m.ID), m.Tier, m.Heat)
		}
		hot, _ := e.tiers.HotSet(ctx, cube)
		var names []string
		for _, m := range hot {
			names = append(names, e.name(m.ID))
		}
		fmt.Fprintf(&b, "pack: [%s] tokens=%d kv_bytes=%d/%d\n", strings.Join(names, " "), st.PackTokens, st.KVBytes, st.KVBudget)
		if st.KVBytes > st.KVBudget {
			t.Errorf("KV budget exceeded: %d > %d", st.KVBytes, st.KVBudget)
		}
		for _, j := range st.Jobs {
			fmt.Fprintf(&b, "pending: %s %s\n", j.Kind, e.name(j.Memory))
		}
	case "packs":
		// what the activation tier holds on disk (every pack of the cube)
		infos := e.kv.List(cube)
		_, disk, n := e.kv.Stats()
		var toks []int
		for _, i := range infos {
			toks = append(toks, i.NTokens)
		}
		slices.Sort(toks)
		fmt.Fprintf(&b, "packs=%d tokens=%v disk_bytes>0=%v\n", n, toks, disk > 0)
	case "run":
		res, err := e.tiers.Run(ctx, RunRequest{Cube: cube, Prompt: arg(d, "prompt", "Once upon a time"), MaxTokens: 8})
		if err != nil {
			return err.Error()
		}
		var ret []string
		for _, m := range res.Prompt.Retrieved {
			ret = append(ret, e.name(m.ID))
		}
		fmt.Fprintf(&b, "cached=%d pack_tokens=%d pack=%d retrieved=[%s]\n", res.CachedTokens, len(res.Prompt.PackTokens), len(res.Prompt.Pack), strings.Join(ret, " "))
		if res.CachedTokens != len(res.Prompt.PackTokens) {
			fmt.Fprintf(&b, "cache does not cover the pack\n")
		}
	case "transitions":
		trs, err := e.tiers.Transitions(ctx, cube, 0)
		if err != nil {
			return err.Error()
		}
		for _, tr := range trs {
			fmt.Fprintf(&b, "%s %s→%s reason=%s heat=%.3f at=+%s tokens=%d decoded=%d\n", e.name(tr.Memory), tr.From, tr.To,
				tr.Reason, tr.Heat, tr.Time.Sub(epoch), tr.Tokens, tr.Decoded)
		}
	case "crash-next-job":
		e.crashes = 1
		b.WriteString("ok\n")
	case "restart":
		e.close()
		e.open()
		b.WriteString("reopened\n")
	case "budget":
		var n int64
		fmt.Sscan(arg(d, "kv", "0"), &n)
		e.opts.KVBytes = n
		e.close()
		e.open()
		fmt.Fprintf(&b, "kv budget %d\n", n)
	default:
		t.Fatalf("unknown command %s", d.Cmd)
	}
	return b.String()
}

// TestTiers runs the tier state machine scripts in testdata/tiers_*.
func TestTiers(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(path[strings.LastIndexByte(path, '/')+1:], "tiers_") {
			t.Skip()
		}
		e := newTierEnv(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return e.cmd(t, d) })
	})
}
