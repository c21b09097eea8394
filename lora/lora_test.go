package lora

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
)

// randomAdapter writes a random rank-4 adapter for stories260K into dir.
func randomAdapter(t testing.TB, dir, name string, seed uint64) string {
	t.Helper()
	p := filepath.Join(dir, name+".gguf")
	if err := WriteRandom(context.Background(), p, testmodels.Stories(t), RandomSpec{Seed: seed}); err != nil {
		t.Fatal(err)
	}
	return p
}

func stories(t testing.TB) Base {
	t.Helper()
	b, err := ReadBase(testmodels.Stories(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRandomAdapterChecks(t *testing.T) {
	p := randomAdapter(t, t.TempDir(), "a", 1)
	f, err := Inspect(p)
	if err != nil {
		t.Fatal(err)
	}
	info, err := Check(f, stories(t))
	if err != nil {
		t.Fatal(err)
	}
	// 5 blocks × (attn_q: A [64,4] + B [4,64]; attn_v: A [64,4] + B [4,32]) f32
	const wantBytes = 5 * (64*4 + 4*64 + 64*4 + 4*32) * 4
	got := fmt.Sprintf("%s rank=%d alpha=%g targets=%d first=%s bytes=%d", info.Arch, info.Rank, info.Alpha, len(info.Targets), info.Targets[0], info.Bytes)
	want := fmt.Sprintf("llama rank=4 alpha=4 targets=10 first=blk.0.attn_q.weight bytes=%d", wantBytes)
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// good returns the metadata and tensors of a valid rank-2 adapter on
// blk.0.attn_q.weight [64, 64] of stories260K.
func good() (map[string]any, []TensorData) {
	meta := map[string]any{"general.architecture": "llama", "general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": float32(2)}
	ts := []TensorData{
		{Name: "blk.0.attn_q.weight.lora_a", Shape: []uint64{64, 2}},
		{Name: "blk.0.attn_q.weight.lora_b", Shape: []uint64{2, 64}},
	}
	return meta, ts
}

// Every file llama.cpp would refuse, or could abort the process on, is
// refused by Inspect or Check with a message naming the problem.
func TestRefused(t *testing.T) {
	base := stories(t)
	dir := t.TempDir()
	cases := []struct {
		name string
		edit func(meta map[string]any, ts []TensorData) []TensorData
		raw  []byte // written as the file instead, when set
		want string
	}{
		{name: "valid", edit: func(m map[string]any, ts []TensorData) []TensorData { return ts }},
		{name: "other architecture", edit: func(m map[string]any, ts []TensorData) []TensorData { m["general.architecture"] = "gpt2"; return ts },
			want: `adapter is for architecture "gpt2", the base model is "llama"`},
		{name: "not an adapter", edit: func(m map[string]any, ts []TensorData) []TensorData { m["general.type"] = "model"; return ts },
			want: `general.type is "model", want "adapter"`},
		{name: "general.type not a string", edit: func(m map[string]any, ts []TensorData) []TensorData { m["general.type"] = uint32(1); return ts },
			want: `general.type is a uint32, want a string`},
		{name: "no adapter.type", edit: func(m map[string]any, ts []TensorData) []TensorData { delete(m, "adapter.type"); return ts },
			want: `adapter.type is "", want "lora"`},
		{name: "alpha not a float32", edit: func(m map[string]any, ts []TensorData) []TensorData { m["adapter.lora.alpha"] = uint32(2); return ts },
			want: `adapter.lora.alpha is a uint32, want a float32`},
		{name: "alora", edit: func(m map[string]any, ts []TensorData) []TensorData {
			m["adapter.alora.invocation_tokens"] = []uint32{1, 2}
			return ts
		}, want: `aLoRA adapters (adapter.alora.invocation_tokens) are not supported`},
		{name: "tensor the base lacks", edit: func(m map[string]any, ts []TensorData) []TensorData {
			ts[0].Name, ts[1].Name = "blk.9.attn_q.weight.lora_a", "blk.9.attn_q.weight.lora_b"
			return ts
		}, want: `blk.9.attn_q.weight: the base model has no such tensor (adapter for another model?)`},
		{name: "wrong input width", edit: func(m map[string]any, ts []TensorData) []TensorData { ts[0].Shape = []uint64{128, 2}; return ts },
			want: `blk.0.attn_q.weight: A [128 2], B [2 64]; base [64 64] wants A [64, r], B [r, 64] (adapter for another model?)`},
		{name: "rank mismatch", edit: func(m map[string]any, ts []TensorData) []TensorData { ts[1].Shape = []uint64{3, 64}; return ts },
			want: `blk.0.attn_q.weight: A [64 2], B [3 64]; base [64 64] wants A [64, r], B [r, 64] (adapter for another model?)`},
		{name: "three dimensions", edit: func(m map[string]any, ts []TensorData) []TensorData {
			ts[0].Shape, ts[1].Shape = []uint64{64, 2, 2}, []uint64{2, 64, 2}
			return ts
		}, want: `blk.0.attn_q.weight: halves A [64 2 2], B [2 64 2] do not match the dimensions of base [64 64]`},
		{name: "one dimension", edit: func(m map[string]any, ts []TensorData) []TensorData { ts[0].Shape = []uint64{128}; return ts },
			want: `tensor blk.0.attn_q.weight.lora_a has 1 dimensions, want 2 (or 3 for expert weights)`},
		{name: "missing half", edit: func(m map[string]any, ts []TensorData) []TensorData { return ts[:1] },
			want: `tensor blk.0.attn_q.weight.lora_a has no partner blk.0.attn_q.weight.lora_b`},
		{name: "integer tensor", edit: func(m map[string]any, ts []TensorData) []TensorData { ts[0].Type = "i32"; return ts },
			want: `tensor blk.0.attn_q.weight.lora_a has type unknown (ggml type 26); want f32, f16, bf16 or q8_0`},
		{name: "not a LoRA half", edit: func(m map[string]any, ts []TensorData) []TensorData {
			return append(ts, TensorData{Name: "output_norm.weight", Shape: []uint64{64}})
		}, want: `tensor output_norm.weight is not a LoRA half (.lora_a or .lora_b)`},
		{name: "norm weight target", edit: func(m map[string]any, ts []TensorData) []TensorData {
			return append(ts, TensorData{Name: "output_norm.weight.lora_a", Shape: []uint64{64, 1}}, TensorData{Name: "output_norm.weight.lora_b", Shape: []uint64{1, 1}})
		}, want: `output_norm.weight: base tensor has shape [64]; LoRA applies to matrices only`},
		{name: "token_embd rank mismatch", edit: func(m map[string]any, ts []TensorData) []TensorData {
			return append(ts, TensorData{Name: "token_embd.weight.lora_a", Shape: []uint64{2, 512}}, TensorData{Name: "token_embd.weight.lora_b", Shape: []uint64{3, 64}})
		}, want: `token_embd.weight: A [2 512], B [3 64]; base [64 512] wants A [r, 512], B [r, 64]`},
		{name: "no tensors", edit: func(m map[string]any, ts []TensorData) []TensorData { return nil }, want: `no tensors`},
		{name: "not a GGUF", raw: []byte("this is not a gguf file at all"), want: `not a readable GGUF: invalid file magic`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".gguf")
			if c.raw != nil {
				if err := os.WriteFile(p, c.raw, 0o644); err != nil {
					t.Fatal(err)
				}
			} else {
				meta, ts := good()
				if err := WriteFile(p, meta, c.edit(meta, ts)); err != nil {
					t.Fatal(err)
				}
			}
			f, err := Inspect(p)
			if err == nil {
				_, err = Check(f, base)
			}
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrBadAdapter) {
				t.Fatalf("err = %v, want ErrBadAdapter", err)
			}
			if want := "lora: adapter refused: " + p + ": " + c.want; err.Error() != want {
				t.Fatalf("err\n got %s\nwant %s", err, want)
			}
		})
	}
}

func openDB(t testing.TB) *datadir.DB {
	t.Helper()
	db, err := datadir.Open(datadir.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	return db
}

func TestRegistry(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pa, pb := randomAdapter(t, dir, "a", 1), randomAdapter(t, dir, "b", 2)
	db := openDB(t)
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	reg, err := NewRegistry(db, RegistryOptions{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	base := stories(t)
	if _, err := reg.Add(ctx, AddRequest{Name: "style", Path: pa, Default: true, Base: &base}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Add(ctx, AddRequest{Name: "style", Path: pb}); !errors.Is(err, ErrExists) {
		t.Fatalf("second add: %v, want ErrExists", err)
	}
	if _, err := reg.Add(ctx, AddRequest{Name: "style", Cube: "lily", Path: pb}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Add(ctx, AddRequest{Name: "tone", Path: pb}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Add(ctx, AddRequest{Name: "bad/name", Path: pb}); !errors.Is(err, ErrBadName) {
		t.Fatalf("bad name: %v", err)
	}
	show := func(cube string) string {
		recs, err := reg.List(ctx, cube)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, r := range recs {
			s = append(s, fmt.Sprintf("%s/%s:%s:default=%v", r.Cube, r.Name, filepath.Base(r.Path), r.Default))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct{ cube, want string }{
		{"", "/style:a.gguf:default=true /tone:b.gguf:default=false"},
		{"lily", "lily/style:b.gguf:default=false /tone:b.gguf:default=false"},
		{"tom", "/style:a.gguf:default=true /tone:b.gguf:default=false"},
		{"*", "/style:a.gguf:default=true /tone:b.gguf:default=false lily/style:b.gguf:default=false"},
	} {
		if got := show(c.cube); got != c.want {
			t.Errorf("List(%q)\n got %s\nwant %s", c.cube, got, c.want)
		}
	}
	r, err := reg.Resolve(ctx, "lily", "style")
	if err != nil || filepath.Base(r.Path) != "b.gguf" || !r.Added.Equal(clock) || r.Rank != 4 {
		t.Fatalf("Resolve lily/style = %+v, %v", r, err)
	}
	if d, _ := reg.Defaults(ctx, "lily"); len(d) != 0 {
		t.Fatalf("lily's own style shadows the global default: %+v", d)
	}
	if err := reg.Remove(ctx, "lily", "style"); err != nil {
		t.Fatal(err)
	}
	if err := reg.Remove(ctx, "lily", "style"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := reg.Resolve(ctx, "lily", "nope"); !errors.Is(err, ErrNotFound) || err.Error() != `lora: adapter not found: "nope" is not registered for cube lily or globally` {
		t.Fatalf("resolve missing: %v", err)
	}
	if d, _ := reg.Defaults(ctx, "lily"); len(d) != 1 || d[0].Name != "style" {
		t.Fatalf("defaults after remove: %+v", d)
	}
}

func TestParseSpecs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "[]"},
		{"none", "[]"},
		{"a", "[a:1]"},
		{"a:0,b:0.5", "[a:0 b:0.5]"},
		{"a:-1", "[a:-1]"},
		{"a:x", `lora: bad adapter name or spec: "a:x": scale "x" is not a finite number`},
		{"a:NaN", `lora: bad adapter name or spec: "a:NaN": scale "NaN" is not a finite number`},
		{"a b", `lora: bad adapter name or spec: "a b": want NAME[:SCALE], NAME 1..64 of [A-Za-z0-9._-], not . or ..`},
	} {
		specs, err := ParseSpecs(c.in)
		got := fmt.Sprint(specs)
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("ParseSpecs(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// loadModel loads stories260K for llama.LoadAdapter.
func loadModel(t testing.TB) (*llama.Model, string) {
	t.Helper()
	p := testmodels.Stories(t)
	llama.Init("")
	m, err := llama.LoadModel(p, llama.ModelParams{UseMmap: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, p
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The manager loads on demand through llama.cpp, never past MaxBytes: it
// frees the least recently used unleased adapter (after Detach), refuses
// when leases hold the budget, frees idle adapters on Trim, and refuses a
// file replaced since registration without loading it.
func TestManagerBudget(t *testing.T) {
	ctx := context.Background()
	model, path := loadModel(t)
	dir := t.TempDir()
	reg, _ := NewRegistry(openDB(t), RegistryOptions{})
	var recs []Record
	for i, n := range []string{"a", "b", "c"} {
		r, err := reg.Add(ctx, AddRequest{Name: n, Path: randomAdapter(t, dir, n, uint64(i+1))})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	per := recs[0].Bytes
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	var log []string
	m, err := NewManager(model, path, reg, Options{MaxBytes: 2 * per, MaxIdle: time.Minute, Now: clock.Now,
		Detach: func(a *llama.Adapter) { log = append(log, "detach") }})
	if err != nil {
		t.Fatal(err)
	}
	loads := 0
	m.opts.load = func(mm *llama.Model, p string) (*llama.Adapter, error) {
		loads++
		return llama.LoadAdapter(mm, p)
	}
	state := func() string {
		ls, n := m.Loaded()
		var s []string
		for _, l := range ls {
			s = append(s, fmt.Sprintf("%s(refs=%d)", l.Name[:1], l.Refs))
		}
		if n > m.opts.MaxBytes {
			t.Fatalf("loaded %d bytes > budget %d", n, m.opts.MaxBytes)
		}
		return fmt.Sprintf("%s bytes=%d/%d loads=%d %s", strings.Join(s, " "), n/per, m.opts.MaxBytes/per, loads, strings.Join(log, ","))
	}
	acq := func(specs ...Spec) *Lease {
		t.Helper()
		l, err := m.Acquire(ctx, "", specs)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	la := acq(Spec{"a", 1})
	clock.Add(time.Second)
	lb := acq(Spec{"b", 0.5})
	if got, want := state(), "a(refs=1) b(refs=1) bytes=2/2 loads=2 "; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if _, err := m.Acquire(ctx, "", []Spec{{"c", 1}}); !errors.Is(err, ErrBudget) {
		t.Fatalf("c while a and b are leased: %v, want ErrBudget", err)
	}
	la.Release()
	clock.Add(time.Second)
	lb.Release()
	la.Release() // idempotent
	lc := acq(Spec{"c", 1})
	if got, want := state(), "b(refs=0) c(refs=1) bytes=2/2 loads=3 detach"; got != want {
		t.Fatalf("after c: got  %s\nwant %s", got, want)
	}
	if len(lc.Refs) != 1 || lc.Refs[0].Name != recs[2].RefName() || lc.Key() != recs[2].RefName()+":1" {
		t.Fatalf("lease refs %+v key %q", lc.Refs, lc.Key())
	}
	lb2 := acq(Spec{"b", 1}) // hit: no load
	if got, want := state(), "b(refs=1) c(refs=1) bytes=2/2 loads=3 detach"; got != want {
		t.Fatalf("hit: got  %s\nwant %s", got, want)
	}
	lb2.Release()
	lc.Release()
	clock.Add(2 * time.Minute)
	if got := m.Trim(ctx); len(got) != 2 {
		t.Fatalf("trim freed %v", got)
	}
	if got, want := state(), " bytes=0/2 loads=3 detach,detach,detach"; got != want {
		t.Fatalf("trim: got  %s\nwant %s", got, want)
	}
	// an explicitly empty list is no adapter; nil is the cube's defaults (none)
	if l := acq(); len(l.Refs) != 0 || l.Key() != "" {
		t.Fatalf("empty: %+v", l.Refs)
	}
	// replace a's file: refused before llama.cpp sees it
	randomAdapter(t, dir, "a", 99)
	if _, err := m.Acquire(ctx, "", []Spec{{"a", 1}}); !errors.Is(err, ErrChanged) {
		t.Fatalf("changed file: %v", err)
	}
	if loads != 3 {
		t.Fatalf("loads %d", loads)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, "", []Spec{{"b", 1}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

// A file that passes Inspect at registration but not Check against the
// base model (another model's adapter) is refused at load.
func TestManagerRefusesOtherBase(t *testing.T) {
	ctx := context.Background()
	model, path := loadModel(t)
	dir := t.TempDir()
	meta, ts := good()
	ts[0].Shape, ts[1].Shape = []uint64{128, 2}, []uint64{2, 128}
	p := filepath.Join(dir, "big.gguf")
	if err := WriteFile(p, meta, ts); err != nil {
		t.Fatal(err)
	}
	reg, _ := NewRegistry(openDB(t), RegistryOptions{})
	if _, err := reg.Add(ctx, AddRequest{Name: "big", Path: p, Default: true}); err != nil {
		t.Fatal(err)
	}
	// an hour old: its stat vouches for it (racyWindow), so the rewrite
	// below is seen by its stat alone
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(model, path, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.opts.load = func(*llama.Model, string) (*llama.Adapter, error) {
		t.Fatal("llama.cpp reached")
		return nil, nil
	}
	_, err = m.Acquire(ctx, "any", nil)
	if !errors.Is(err, ErrBadAdapter) || !strings.Contains(err.Error(), "base [64 64] wants A [64, r], B [r, 64] (adapter for another model?)") {
		t.Fatalf("err %v", err)
	}
}

// Adapters evicted under load never hang the engine: with a budget of one
// adapter, requests alternating between two adapters force a Detach
// (Engine.DetachAdapter, batcher then engine lock) while other requests
// decode (the batch loop holds the engine lock for a step). Before the
// step finished its jobs without the batcher lock, this could deadlock
// for good.
func TestEvictionUnderLoad(t *testing.T) {
	ctx := context.Background()
	p := testmodels.Stories(t)
	eng, err := runtime.Load(ctx, runtime.Options{ModelPath: p, NCtx: 1024, NSeqMax: 4, Threads: 1, LoRA: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	dir := t.TempDir()
	reg, _ := NewRegistry(openDB(t), RegistryOptions{})
	var per int64
	for i, n := range []string{"a", "b"} {
		r, err := reg.Add(ctx, AddRequest{Name: n, Path: randomAdapter(t, dir, n, uint64(i+1))})
		if err != nil {
			t.Fatal(err)
		}
		per = r.Bytes
	}
	m, err := NewManager(eng.Model(), p, reg, Options{MaxBytes: per, Detach: eng.DetachAdapter})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	toks, _ := eng.Tokenize("Once upon a time", true)
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 4 {
			wg.Go(func() {
				for i := range 60 {
					name := []string{"a", "b"}[(w+i)%2]
					var refs []Ref
					var lease *Lease
					if w%2 == 0 { // half the requests attach an adapter (and evict the other)
						l, err := m.Acquire(ctx, "", []Spec{{Name: name, Scale: 1}})
						if errors.Is(err, ErrBudget) {
							continue // the other adapter is leased right now
						}
						if err != nil {
							errs <- err
							return
						}
						refs, lease = l.Refs, l
					}
					_, err := eng.Generate(ctx, runtime.Request{Seq: w, Tokens: toks, MaxTokens: 8, Adapters: refs})
					lease.Release()
					if err != nil && !errors.Is(err, runtime.ErrSeqBusy) {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		done <- <-errs
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Minute): // a deadlock, not a slow machine
		t.Fatal("generation and adapter eviction deadlocked")
	}
}

// An adapter file rewritten in place (same path, same inode) while its
// adapter is loaded is noticed at the next Acquire: ErrChanged, the loaded
// weights are not lent and the refused lease holds nothing; the file put
// back as registered is lent again without a reload.
func TestManagerFileRewritten(t *testing.T) {
	ctx := context.Background()
	model, path := loadModel(t)
	dir := t.TempDir()
	reg, _ := NewRegistry(openDB(t), RegistryOptions{})
	p := randomAdapter(t, dir, "persona", 1)
	rec, err := reg.Add(ctx, AddRequest{Name: "persona", Path: p})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewManager(model, path, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	loads := 0
	m.opts.load = func(mm *llama.Model, p string) (*llama.Adapter, error) {
		loads++
		return llama.LoadAdapter(mm, p)
	}
	l, err := m.Acquire(ctx, "", []Spec{{"persona", 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := l.Refs[0].Name, "persona@"+rec.SHA256[:12]; got != want {
		t.Fatalf("ref %q, want %q", got, want)
	}
	l.Release()
	old, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := os.ReadFile(randomAdapter(t, dir, "other", 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(newer) != len(old) {
		t.Fatalf("sizes %d and %d: the test wants a same-size rewrite", len(newer), len(old))
	}
	if err := os.WriteFile(p, newer, 0o644); err != nil { // in place: O_TRUNC on the same inode
		t.Fatal(err)
	}
	_, err = m.Acquire(ctx, "", []Spec{{"persona", 1}})
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "registered "+rec.SHA256[:12]) {
		t.Fatalf("rewritten file: %v, want ErrChanged", err)
	}
	if ls, _ := m.Loaded(); len(ls) != 1 || ls[0].Refs != 0 {
		t.Fatalf("loaded after the refusal: %+v", ls)
	}
	if err := os.WriteFile(p, old, 0o644); err != nil { // a new time: hashed at every lease until it is old
		t.Fatal(err)
	}
	l, err = m.Acquire(ctx, "", []Spec{{"persona", 1}})
	if err != nil {
		t.Fatalf("file put back: %v", err)
	}
	l.Release()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Acquire(ctx, "", []Spec{{"persona", 1}}); !errors.Is(err, ErrChanged) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file removed: %v, want ErrChanged and ErrNotExist", err)
	}
	if loads != 1 {
		t.Fatalf("%d loads, want 1", loads)
	}
}

// A cube's default adapter retired while a request leases it (its record
// removed, then its file, between Acquire's reading of the defaults and
// its lease: what the parametric tier's retirement does under traffic)
// gives a lease without it, not an error; a file gone under a record
// still registered stays ErrChanged. Both with the adapter loaded before
// and not.
func TestManagerDefaultRetiredWhileLeasing(t *testing.T) {
	ctx := context.Background()
	model, path := loadModel(t)
	for _, loaded := range []bool{true, false} {
		dir := t.TempDir()
		reg, _ := NewRegistry(openDB(t), RegistryOptions{})
		p := randomAdapter(t, dir, "distilled", 1)
		if _, err := reg.Add(ctx, AddRequest{Name: "distilled", Cube: "lily", Path: p, Default: true}); err != nil {
			t.Fatal(err)
		}
		m, err := NewManager(model, path, reg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if loaded {
			l, err := m.Acquire(ctx, "lily", nil)
			if err != nil || len(l.Refs) != 1 {
				t.Fatalf("before: %v, %+v", err, l)
			}
			l.Release()
		}
		calls := 0
		m.afterResolve = func() {
			if calls++; calls == 1 {
				if err := reg.Remove(ctx, "lily", "distilled"); err != nil {
					t.Error(err)
				}
				if err := os.Remove(p); err != nil {
					t.Error(err)
				}
			}
		}
		l, err := m.Acquire(ctx, "lily", nil)
		if err != nil || len(l.Refs) != 0 {
			t.Fatalf("loaded before %v: %v, %+v; want a lease without the retired adapter", loaded, err, l)
		}
		l.Release()
		if calls != 2 {
			t.Fatalf("loaded before %v: resolved %d times, want 2", loaded, calls)
		}
		// the file gone, the record kept: an error, not a retry's silence
		p2 := randomAdapter(t, dir, "kept", 2)
		if _, err := reg.Add(ctx, AddRequest{Name: "kept", Cube: "lily", Path: p2, Default: true}); err != nil {
			t.Fatal(err)
		}
		m.afterResolve = func() { os.Remove(p2) }
		if _, err := m.Acquire(ctx, "lily", nil); !errors.Is(err, ErrChanged) && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("loaded before %v: file removed, record kept: %v, want an error", loaded, err)
		}
		m.Close()
	}
}
