package scheduler

import (
	"context"
	"testing"

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

type env struct {
	eng *runtime.Engine
	mem *textmem.Store
	kv  *kvcache.Cache
	r   *Runner
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, runtime.Options{NCtx: 1024, Threads: 2})
}

// newEnvWith is newEnv with engine options (ModelPath is stories260K).
func newEnvWith(t *testing.T, o runtime.Options) *env {
	t.Helper()
	o.ModelPath = testmodels.Stories(t)
	eng, err := runtime.Load(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	db, err := badger.Open(badger.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := textmem.Open(db, textmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := kvcache.Open(db, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kv.Close()
		mem.Close()
		db.Close()
		eng.Close()
	})
	return &env{eng: eng, mem: mem, kv: kv, r: New(eng, mem, kv, Options{})}
}

func (e *env) run(t *testing.T, cube, prompt string, noCache bool) RunResult {
	t.Helper()
	r, err := e.r.Run(context.Background(), RunRequest{Cube: cube, Prompt: prompt, NoCache: noCache, MaxTokens: 48})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Greedy output with the restored pack is byte-identical to a cold prefill
// of the same prompt, for several memory sets (and an empty cube).
func TestRestoredPackEqualsColdPrefill(t *testing.T) {
	e := newEnv(t)
	sets := map[string][]string{
		"pets":   {"Lily has a dog named Max.", "Max is brown and very fast.", "Lily walks Max every morning."},
		"food":   {"Tom loves red apples.", "Tom does not like fish.", "Tom's mom bakes bread on Sunday.", "Tom eats soup when it rains."},
		"school": {"Sue is in the second grade.", "Sue's teacher is Mr. Brown."},
		"empty":  nil,
	}
	ctx := context.Background()
	for cube, texts := range sets {
		t.Run(cube, func(t *testing.T) {
			for _, s := range texts {
				if _, err := e.mem.Add(ctx, cube, textmem.Memory{Text: s}); err != nil {
					t.Fatal(err)
				}
			}
			info, p, err := e.r.Warm(ctx, cube, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Pack) != len(texts) || info.NTokens != len(p.PackTokens) {
				t.Fatalf("pack holds %d memories, %d tokens; want %d memories, %d tokens", len(p.Pack), info.NTokens, len(texts), len(p.PackTokens))
			}
			for _, prompt := range []string{"Once upon a time,", "One day, the sun"} {
				cold := e.run(t, cube, prompt, true)
				warm := e.run(t, cube, prompt, false)
				if cold.CachedTokens != 0 || warm.CachedTokens != len(p.PackTokens) {
					t.Fatalf("cached tokens: cold %d, warm %d, pack %d", cold.CachedTokens, warm.CachedTokens, len(p.PackTokens))
				}
				if warm.Text != cold.Text || warm.EvalTokens != cold.EvalTokens {
					t.Fatalf("prompt %q:\ncold %q\nwarm %q", prompt, cold.Text, warm.Text)
				}
				if cold.Text == "" {
					t.Fatal("empty output")
				}
			}
		})
	}
}

// The cube's memories reach the prompt: the pack tokens are the rendered
// preamble and memory lines.
func TestMemoriesReachPrompt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.mem.Add(ctx, "c", textmem.Memory{Text: "Lily has a dog."})
	p, err := e.r.Build(ctx, "c", "Hello")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPreamble + "\n- Lily has a dog.\n"
	if got := e.eng.Detokenize(p.PackTokens); got != " "+want && got != want {
		t.Fatalf("pack text %q", got)
	}
}

// Memories beyond the pack budget are found by retrieval and placed after
// the pack; the pack stays a prefix.
func TestRetrievalBeyondPack(t *testing.T) {
	e := newEnv(t)
	pre, _ := e.eng.Tokenize(DefaultPreamble, true)
	e.r.opts.MaxPackTokens = len(pre) + 30 // room for about two memory lines
	ctx := context.Background()
	texts := []string{"Lily has a red ball.", "Tom has a big blue kite.", "The cat sleeps on the warm mat.", "Sue bakes a cake with her mom."}
	for _, s := range texts {
		if _, err := e.mem.Add(ctx, "c", textmem.Memory{Text: s}); err != nil {
			t.Fatal(err)
		}
	}
	p, err := e.r.Build(ctx, "c", "What does Sue bake?")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pack) == len(texts) || len(p.Pack) == 0 {
		t.Fatalf("pack holds %d of %d memories; budget should cut it", len(p.Pack), len(texts))
	}
	found := false
	for _, m := range p.Retrieved {
		if m.Text == texts[3] {
			found = true
		}
	}
	if !found {
		t.Fatalf("retrieval missed the memory: %+v", p.Retrieved)
	}
	for i, tok := range p.PackTokens {
		if p.Tokens[i] != tok {
			t.Fatal("pack is not a prefix of the prompt")
		}
	}
}
