package memosrt

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
)

type loraEnv struct {
	o   *OS
	eng *runtime.Engine
	man *lora.Manager
}

// newLoraEnv registers two random rank-4 adapters for stories260K: "a"
// (global) and "b" (cube "c", on by default there).
func newLoraEnv(t *testing.T) *loraEnv {
	t.Helper()
	ctx := context.Background()
	opts := testOptions(t, t.TempDir())
	o := openOS(t, opts)
	e := &loraEnv{o: o, eng: o.Engine(), man: o.prim().Adapters}
	dir := t.TempDir()
	for i, a := range []struct {
		name, cube string
		def        bool
	}{{"a", "", false}, {"b", "c", true}} {
		p := filepath.Join(dir, a.name+".gguf")
		if err := lora.WriteRandom(ctx, p, testmodels.Stories(t), lora.RandomSpec{Seed: uint64(i + 1), Std: 0.5}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.AdapterRegistry().Add(ctx, lora.AddRequest{Name: a.name, Cube: a.cube, Path: p, Default: a.def}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// gen generates on the OS's i-th sequence directly (the pool is idle).
func (e *loraEnv) gen(t *testing.T, i int, prompt string, refs []runtime.AdapterRef) string {
	t.Helper()
	toks, err := e.eng.Tokenize(prompt, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.eng.Generate(context.Background(), runtime.Request{Seq: e.o.prim().Seqs[i], Tokens: toks, MaxTokens: 24, Adapters: refs})
	if err != nil {
		t.Fatal(err)
	}
	if res.EvalTokens == 0 {
		t.Fatal("no output")
	}
	return res.Text
}

func (e *loraEnv) lease(t *testing.T, cube string, specs ...lora.Spec) *lora.Lease {
	t.Helper()
	l, err := e.man.Acquire(context.Background(), cube, specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Release)
	return l
}

// Output under an adapter at scale 0 equals the base output, at scale 1
// differs, and equals it again once the request carries no adapter; two
// adapters at once give a third output; an explicitly empty list turns off
// the cube's default adapter.
func TestAdapterOutputs(t *testing.T) {
	e := newLoraEnv(t)
	const prompt = "Once upon a time, there was a little girl"
	base := e.gen(t, 0, prompt, nil)
	a0 := e.gen(t, 0, prompt, e.lease(t, "", lora.Spec{Name: "a", Scale: 0}).Refs)
	a1 := e.gen(t, 0, prompt, e.lease(t, "", lora.Spec{Name: "a", Scale: 1}).Refs)
	after := e.gen(t, 0, prompt, nil)
	both := e.gen(t, 1, prompt, e.lease(t, "c", lora.Spec{Name: "a", Scale: 1}, lora.Spec{Name: "b", Scale: 1}).Refs)
	b1 := e.gen(t, 1, prompt, e.lease(t, "c", lora.Spec{Name: "b", Scale: 1}).Refs)
	def := e.gen(t, 0, prompt, e.lease(t, "c").Refs)                   // nil specs: cube c's default, b
	off := e.gen(t, 0, prompt, e.lease(t, "c", []lora.Spec{}...).Refs) // explicitly none
	t.Logf("base  %q\na@1   %q\na+b   %q\nb     %q", base, a1, both, b1)
	if a0 != base {
		t.Errorf("scale 0 differs from base:\n%q\n%q", a0, base)
	}
	if a1 == base {
		t.Errorf("scale 1 equals base: %q", a1)
	}
	if after != base {
		t.Errorf("after detach differs from base:\n%q\n%q", after, base)
	}
	if both == a1 || both == b1 || both == base {
		t.Errorf("two adapters: %q (a %q, b %q)", both, a1, b1)
	}
	if def != b1 {
		t.Errorf("default adapter of cube c:\n%q, want b's\n%q", def, b1)
	}
	if off != base {
		t.Errorf("explicitly empty adapter list:\n%q, want base\n%q", off, base)
	}
	if again := e.gen(t, 1, prompt, e.lease(t, "c", lora.Spec{Name: "b", Scale: 1}, lora.Spec{Name: "a", Scale: 1}).Refs); again != both {
		t.Errorf("a+b not deterministic (order b,a): %q vs %q", again, both)
	}
}

// A conversation pack computed under one adapter set is never restored
// under another (another adapter, another scale, or none), and reusing it
// under its own set gives the output of a cold prefill under that set.
func TestAdapterKVIsolation(t *testing.T) {
	e := newLoraEnv(t)
	ctx := context.Background()
	addMemories(t, e.o, "d", "Lily has a dog named Max.", "Max likes to run.")
	a1 := []lora.Spec{{Name: "a", Scale: 1}}
	turn := []Message{{Role: "user", Content: "One day"}}
	chat := func(specs []lora.Spec, noCache bool) *Response {
		t.Helper()
		res, err := e.o.Chat(ctx, Request{Cube: "d", Messages: turn, NumPredict: 16, Adapters: specs, NoCache: noCache})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	cold := chat(a1, true) // its state is saved as a conversation pack under a@1
	warm := chat(a1, false)
	if warm.Usage.CachedTokens == 0 || warm.Text != cold.Text || !strings.HasPrefix(warm.Adapters, "a@") {
		t.Fatalf("under a@1: cached %d (%s); warm %q cold %q", warm.Usage.CachedTokens, warm.Adapters, warm.Text, cold.Text)
	}
	e.o.p.WaitWrites()
	var conv []int32
	for _, p := range e.o.KVCache().List("conv:d") {
		h, _, _, err := e.o.KVCache().State(p.ID)
		if err != nil {
			t.Fatal(err)
		}
		conv = append(h.Tokens, 0)
	}
	if conv == nil {
		t.Fatal("no conversation pack under a@1")
	}
	for _, c := range []struct {
		name string
		refs []runtime.AdapterRef
	}{
		{"none", nil},
		{"a@0.5", e.lease(t, "", lora.Spec{Name: "a", Scale: 0.5}).Refs},
		{"b@1", e.lease(t, "c", lora.Spec{Name: "b", Scale: 1}).Refs},
		{"a@1+b@1", e.lease(t, "c", lora.Spec{Name: "a", Scale: 1}, lora.Spec{Name: "b", Scale: 1}).Refs},
	} {
		rs, err := e.o.KVCache().Restore(ctx, e.eng, e.o.prim().Seqs[0], conv, kvcache.RestoreOptions{AdapterKey: runtime.AdapterKey(c.refs), Scope: "d"})
		if err != nil {
			t.Fatal(err)
		}
		if rs.Tokens != 0 || rs.PackID != "" {
			t.Errorf("%s restored %d tokens of the a@1 pack", c.name, rs.Tokens)
		}
	}
}

// After a request under an adapter, a request without one whose only
// uncached token gives a one-token batch (the shape of the adapter
// request's last decode) must not run on the adapter's graph: llama.cpp
// reuses the previous graph when the batch shape is unchanged, and its
// reuse check compares the adapter set by the address of the context's
// map, which never changes (llama-graph.h llm_graph_params::allow_reuse).
//
// The engine drops the previous graph on every adapter switch for this
// reason (llama.Ctx.DropGraph).
func TestAdapterSwitchOneTokenBatch(t *testing.T) {
	e := newLoraEnv(t)
	ctx := context.Background()
	const prompt = "Once upon a time, there was a little girl"
	base := e.gen(t, 0, prompt, nil)
	toks, _ := e.eng.Tokenize(prompt, true)
	for _, c := range []struct {
		name string
		refs []runtime.AdapterRef
	}{{"a@1", e.lease(t, "", lora.Spec{Name: "a", Scale: 1}).Refs}, {"a@0.5", e.lease(t, "", lora.Spec{Name: "a", Scale: 0.5}).Refs}} {
		s1 := e.o.prim().Seqs[1]
		if err := e.eng.ClearSeq(s1); err != nil {
			t.Fatal(err)
		}
		if err := e.eng.Prefill(ctx, s1, toks[:len(toks)-1], 0); err != nil {
			t.Fatal(err)
		}
		e.gen(t, 0, prompt, c.refs) // ends with one-token decodes under the adapter
		res, err := e.eng.Generate(ctx, runtime.Request{Seq: s1, Tokens: toks, NPast: len(toks) - 1, MaxTokens: 24})
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != base {
			t.Errorf("after %s, base request with one uncached token:\n got %q\nwant %q", c.name, res.Text, base)
		}
	}
}

// A cube with a default adapter restores its tier pack: the pack is
// computed under the cube's default adapter set and stored under its key,
// and a request naming no adapter restores it, with the output of a cold
// prefill under the same adapter. Replacing the adapter's file under the
// same name (another SHA-256) leaves the old pack unusable; the next Tick
// refreshes it under the new key.
func TestTierPackUnderDefaultAdapter(t *testing.T) {
	e := newLoraEnv(t)
	ctx := context.Background()
	addMemories(t, e.o, "c", "Lily has a dog named Max.", "Max likes to run in the park.")
	st, err := e.o.Warm(ctx, "c", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Packs) != 1 {
		t.Fatalf("warm: %d packs", len(st.Packs))
	}
	def := e.lease(t, "c").Key() // b@<sha>:1, the cube's default set
	if !strings.HasPrefix(def, "b@") || st.Packs[0].AdapterKey != def {
		t.Fatalf("pack computed under %q, the cube's default set is %q", st.Packs[0].AdapterKey, def)
	}
	turn := []Message{{Role: "user", Content: "One day"}}
	chat := func(noCache bool) *Response {
		t.Helper()
		res, err := e.o.Chat(ctx, Request{Cube: "c", Messages: turn, NumPredict: 16, NoCache: noCache, Record: RecordNone})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	warm := chat(false) // first: a slot holds nothing of the cube yet
	cold := chat(true)
	if warm.CacheSource != SourceRestored || warm.PackID != st.Packs[0].ID || warm.Adapters != def {
		t.Fatalf("warm chat: source %q pack %q adapters %q; want the tier pack %s under %s", warm.CacheSource, warm.PackID, warm.Adapters, st.Packs[0].ID, def)
	}
	if warm.Text != cold.Text {
		t.Fatalf("restored under the default adapter %q, cold %q", warm.Text, cold.Text)
	}

	// a same-named replacement file: another SHA-256, another key
	p := filepath.Join(t.TempDir(), "b2.gguf")
	if err := lora.WriteRandom(ctx, p, testmodels.Stories(t), lora.RandomSpec{Seed: 7, Std: 0.5}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.o.AdapterRegistry().Add(ctx, lora.AddRequest{Name: "b", Cube: "c", Path: p, Default: true, Replace: true}); err != nil {
		t.Fatal(err)
	}
	def2 := e.lease(t, "c").Key()
	if def2 == def {
		t.Fatalf("replacement file kept the key %q", def)
	}
	if _, err := e.o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	e.o.p.WaitWrites()
	var packs []kvcache.Info
	for _, i := range e.o.KVCache().List("c") {
		packs = append(packs, i)
	}
	if len(packs) != 1 || packs[0].AdapterKey != def2 {
		t.Fatalf("after the replacement and a tick: packs %+v; want one under %s", packs, def2)
	}
	warm2 := chat(false) // the slot's state is under the old key
	cold2 := chat(true)
	if warm2.CacheSource != SourceRestored || warm2.PackID != packs[0].ID || warm2.Text != cold2.Text {
		t.Fatalf("after the refresh: source %q pack %q (want %s), text %q, cold %q", warm2.CacheSource, warm2.PackID, packs[0].ID, warm2.Text, cold2.Text)
	}
	if cold2.Text == cold.Text {
		t.Fatalf("the replacement adapter gives the same output %q", cold.Text)
	}
}
