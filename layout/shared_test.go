package layout

import (
	"cmp"
	"context"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/textmem"
)

// Two prompts reading the same shared cubes for different written cubes
// start with the same SharedTokens tokens: the preamble and the shared
// cubes' members, in the order named; the written cube's follow.
func TestLayoutSharedPrefix(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	shop := e.Add(t, "shop", "The tea shop opens at nine.")
	asst := e.Add(t, "assistant-x", "The assistant answers with short stories.")
	alice := e.Add(t, "alice", "Alice likes green tea.")
	bob := e.Add(t, "bob", "Bob likes black coffee.")
	l := New(e.Eng, e.Mem, Options{})
	shared := []SharedCube{{Cube: "shop", Members: shop}, {Cube: "assistant-x", Members: asst}}
	msgs := []Message{{Role: "user", Content: "Hello"}}
	pa, err := l.Assemble(ctx, Input{Cube: "alice", Members: alice, Messages: msgs, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := l.Assemble(ctx, Input{Cube: "bob", Members: bob, Messages: msgs, Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	wantSystem := DefaultPreamble + "\n- The tea shop opens at nine.\n- The assistant answers with short stories.\n- Alice likes green tea.\n"
	if pa.System != wantSystem || pa.SharedPack != 2 || len(pa.Pack) != 3 {
		t.Fatalf("system %q, %d shared of %d pack members", pa.System, pa.SharedPack, len(pa.Pack))
	}
	sharedToks, err := e.Eng.Tokenize(DefaultPreamble+"\n- The tea shop opens at nine.\n- The assistant answers with short stories.\n", true)
	if err != nil {
		t.Fatal(err)
	}
	if pa.SharedTokens != len(sharedToks) || pb.SharedTokens != len(sharedToks) {
		t.Fatalf("shared tokens %d and %d, want %d", pa.SharedTokens, pb.SharedTokens, len(sharedToks))
	}
	if !slices.Equal(pa.Tokens[:pa.SharedTokens], sharedToks) || !slices.Equal(pb.Tokens[:pb.SharedTokens], sharedToks) {
		t.Fatal("the shared prefix differs from the shared text's tokens")
	}
	if slices.Equal(pa.PackTokens, pb.PackTokens) || !slices.Equal(pa.PackTokens[:pa.SharedTokens], pb.PackTokens[:pb.SharedTokens]) {
		t.Fatal("the packs should differ after the shared prefix only")
	}
	if got := pa.CubeCounts(); len(got) != 3 || got["shop"] != 1 || got["assistant-x"] != 1 || got["alice"] != 1 {
		t.Fatalf("cube counts %v", got)
	}
	// without shared cubes nothing changes: no shared prefix
	p, err := l.Assemble(ctx, Input{Cube: "alice", Members: alice, Messages: msgs})
	if err != nil || p.SharedTokens != 0 || p.SharedPack != 0 {
		t.Fatalf("one cube: %d shared tokens, %d shared members, %v", p.SharedTokens, p.SharedPack, err)
	}
}

// Retrieval over several cubes merges their hits: each memory once, best
// score first, at most RetrieveK in all, each with its cube.
func TestLayoutSharedRetrieval(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	e.Add(t, "alice", "Alice drinks tea.", "Alice has a red bike.")
	e.Add(t, "shop", "The shop sells tea and tea cups and tea pots.", "The shop is closed on Sunday.")
	e.Add(t, "assistant-x", "Tell stories about tea.")
	l := New(e.Eng, e.Mem, Options{RetrieveK: 3})
	in := Input{Cube: "alice", Messages: []Message{{Role: "user", Content: "tea"}},
		Shared: []SharedCube{{Cube: "shop"}, {Cube: "assistant-x"}}}
	p, err := l.Assemble(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range p.Retrieved {
		got = append(got, m.Cube+": "+m.Text)
	}
	if len(got) != 3 || !slices.Contains(got, "alice: Alice drinks tea.") || !slices.Contains(got, "shop: The shop sells tea and tea cups and tea pots.") ||
		!slices.Contains(got, "assistant-x: Tell stories about tea.") {
		t.Fatalf("retrieved %q", got)
	}
	// the merged order is the hits' scores, higher first
	var scores []float64
	for _, c := range []string{"alice", "shop", "assistant-x"} {
		hits, err := e.Mem.SearchWith(ctx, c, textmem.DefaultQuery("tea", 5))
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if slices.ContainsFunc(p.Retrieved, func(m textmem.Memory) bool { return m.ID == h.Memory.ID }) {
				scores = append(scores, h.Score)
			}
		}
	}
	slices.SortFunc(scores, func(a, b float64) int { return cmp.Compare(b, a) })
	for i, m := range p.Retrieved {
		hits, _ := e.Mem.SearchWith(ctx, m.Cube, textmem.DefaultQuery("tea", 5))
		j := slices.IndexFunc(hits, func(h textmem.Hit) bool { return h.Memory.ID == m.ID })
		if j < 0 || hits[j].Score != scores[i] {
			t.Fatalf("retrieved %d (%s) out of score order: %v", i, m.Text, scores)
		}
	}
}
