package memosrt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// tierEnv is one data directory opened as an OS on a moved clock; restart
// closes and reopens it.
type tierEnv struct {
	t       *testing.T
	dir     string
	clock   *fakeClock
	o       *OS
	opts    Options
	alias   map[string]string // memory id → m1, m2, ...
	crashes int               // jobs to fail after their pack is stored
}

func newTierEnv(t *testing.T) *tierEnv {
	e := &tierEnv{t: t, dir: t.TempDir(), clock: &fakeClock{t: epoch}, alias: map[string]string{}}
	e.opts = testOptions(t, e.dir)
	e.opts.Parallel = 1
	e.opts.NoPersist = true
	e.opts.Clock = e.clock
	e.opts.Tiers.AfterPut = func(scheduler.Job) error {
		if e.crashes > 0 {
			e.crashes--
			return errors.New("simulated crash")
		}
		return nil
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *tierEnv) open() {
	o, err := Open(context.Background(), e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.o = o
}

func (e *tierEnv) close() {
	if e.o == nil {
		return
	}
	if err := e.o.Close(context.Background()); err != nil {
		e.t.Error(err)
	}
	e.o = nil
}

func (e *tierEnv) name(id string) string {
	if a, ok := e.alias[id]; ok {
		return a
	}
	return id
}

func (e *tierEnv) unalias(msg string) string {
	for id, a := range e.alias {
		msg = strings.ReplaceAll(msg, id, a)
	}
	return msg
}

func arg(d *datadriven.TestData, key, def string) string {
	for _, a := range d.CmdArgs {
		if a.Key == key {
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func names(e *tierEnv, mems []textmem.Memory) string {
	var out []string
	for _, m := range mems {
		out = append(out, e.name(m.ID))
	}
	return strings.Join(out, " ")
}

func (e *tierEnv) cmd(t *testing.T, d *datadriven.TestData) string {
	ctx := context.Background()
	cube := arg(d, "cube", "c")
	var b strings.Builder
	times := 1
	fmt.Sscan(arg(d, "times", "1"), &times)
	switch d.Cmd {
	case "add":
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			m, err := e.o.AddMemory(ctx, cube, textmem.Memory{Text: line})
			if err != nil {
				return err.Error()
			}
			a := fmt.Sprintf("m%d", len(e.alias)+1)
			e.alias[m.ID] = a
			fmt.Fprintf(&b, "%s: %s\n", a, line)
			e.clock.Advance(time.Second)
		}
	case "search":
		for range times {
			hits, err := e.o.Search(ctx, cube, textmem.DefaultQuery(arg(d, "query", ""), 3))
			if err != nil {
				return err.Error()
			}
			var mems []textmem.Memory
			for _, h := range hits {
				mems = append(mems, h.Memory)
			}
			fmt.Fprintf(&b, "hits: %s\n", names(e, mems))
		}
	case "chat":
		// a chat turn (its text is the input): retrieval puts matching
		// memories into the prompt; the turn is not recorded (the scripts
		// follow the memories they add; TestTurnRecording follows turns)
		for range times {
			res, err := e.o.Chat(ctx, Request{Cube: cube, NumPredict: 4, Record: RecordNone,
				Messages: []Message{{Role: "user", Content: strings.TrimSpace(d.Input)}}})
			if err != nil {
				return err.Error()
			}
			fmt.Fprintf(&b, "cached=%d pack=%d retrieved=%d\n", res.Usage.CachedTokens, res.PackMemories, res.Retrieved)
		}
	case "advance":
		dur, err := time.ParseDuration(arg(d, "by", "0s"))
		if err != nil {
			return err.Error()
		}
		e.clock.Advance(dur)
		fmt.Fprintf(&b, "now +%s\n", e.clock.Now().Sub(epoch))
	case "tick":
		rep, err := e.o.Tick(ctx)
		fmt.Fprintf(&b, "planned=%d done=%d failed=%d\n", rep.Planned, rep.Done, rep.Failed)
		if err != nil {
			fmt.Fprintf(&b, "error: %s\n", e.unalias(err.Error()))
		}
	case "state":
		st, err := e.o.Tiers(ctx, cube, 0)
		if err != nil {
			return err.Error()
		}
		mems := slices.Clone(st.Memories)
		slices.SortFunc(mems, func(a, b scheduler.MemoryTier) int { return strings.Compare(e.name(a.ID), e.name(b.ID)) })
		for _, m := range mems {
			fmt.Fprintf(&b, "%s %s heat=%.3f\n", e.name(m.ID), m.Tier, m.Heat)
		}
		hot, _ := e.o.p.Scheduler().HotSet(ctx, cube)
		fmt.Fprintf(&b, "pack: [%s] tokens=%d kv_bytes=%d/%d\n", names(e, hot), st.PackTokens, st.KVBytes, st.KVBudget)
		if st.KVBytes > st.KVBudget {
			t.Errorf("KV budget exceeded: %d > %d", st.KVBytes, st.KVBudget)
		}
		for _, j := range st.Jobs {
			fmt.Fprintf(&b, "pending: %s %s\n", j.Kind, e.name(j.Memory))
		}
	case "packs":
		// what the activation tier holds on disk (every pack of the cube)
		infos := e.o.KVCache().List(cube)
		_, disk, n := e.o.KVCache().Stats()
		var toks []int
		for _, i := range infos {
			toks = append(toks, i.NTokens)
		}
		slices.Sort(toks)
		fmt.Fprintf(&b, "packs=%d tokens=%v disk_bytes>0=%v\n", n, toks, disk > 0)
	case "run":
		res, err := e.o.Generate(ctx, Request{Cube: cube, Prompt: arg(d, "prompt", "Once upon a time"), NumPredict: 8})
		if err != nil {
			return err.Error()
		}
		st, err := e.o.Tiers(ctx, cube, 1)
		if err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "cached=%d pack_tokens=%d pack=%d retrieved=%d\n", res.Usage.CachedTokens, st.PackTokens, res.PackMemories, res.Retrieved)
		if res.Usage.CachedTokens < st.PackTokens {
			fmt.Fprintf(&b, "cache does not cover the pack\n")
		}
	case "transitions":
		trs, err := e.o.p.Scheduler().Transitions(ctx, cube, 0)
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
		e.opts.Tiers.KVBytes = n
		e.close()
		e.open()
		fmt.Fprintf(&b, "kv budget %d\n", n)
	default:
		t.Fatalf("unknown command %s", d.Cmd)
	}
	return b.String()
}

// TestTiers runs the tier state machine scripts in testdata/tiers_*: heat
// from searches and chats, promotions at one tick, demotion by the clock,
// the KV budget, and a restart in the middle of a job.
func TestTiers(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.HasPrefix(path[strings.LastIndexByte(path, '/')+1:], "tiers_") {
			t.Skip()
		}
		e := newTierEnv(t)
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string { return e.cmd(t, d) })
	})
}
