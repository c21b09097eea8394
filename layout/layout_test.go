package layout

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/textmem"
)

// The pack is the preamble and one line per member, tokenized with BOS;
// Pack and Assemble give the same pack tokens, a prefix of the prompt.
func TestLayoutPack(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	mems := e.Add(t, "c", "Lily has a dog.", "Tom has a kite.")
	l := New(e.Eng, e.Mem, Options{})
	pack, err := l.Pack(ctx, "c", mems)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultPreamble + "\n- Lily has a dog.\n- Tom has a kite.\n"
	if got := e.Eng.Detokenize(pack.PackTokens); got != " "+want && got != want {
		t.Fatalf("pack text %q", got)
	}
	if !slices.Equal(pack.Tokens, pack.PackTokens) || pack.System != want {
		t.Fatalf("a pack alone: %d tokens, %d pack tokens, system %q", len(pack.Tokens), len(pack.PackTokens), pack.System)
	}
	for _, msgs := range [][]Message{
		{{Role: "user", Content: "Hello"}},
		{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hi"}, {Role: "assistant", Content: " Hello!"}, {Role: "user", Content: "Tell me"}},
	} {
		p, err := l.Assemble(ctx, Input{Cube: "c", Members: mems, Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(p.PackTokens, pack.PackTokens) || !slices.Equal(p.Tokens[:len(pack.PackTokens)], pack.PackTokens) {
			t.Fatalf("messages %v: the pack is not a prefix of the prompt", msgs)
		}
	}
}

// Memories beyond the pack budget are found by retrieval and placed before
// the last user turn; the pack stays a prefix.
func TestLayoutRetrievalBeyondPack(t *testing.T) {
	e := testenv.NewEnv(t)
	pre, _ := e.Eng.Tokenize(DefaultPreamble, true)
	l := New(e.Eng, e.Mem, Options{MaxPackTokens: len(pre) + 30}) // room for about two memory lines
	ctx := context.Background()
	texts := []string{"Lily has a red ball.", "Tom has a big blue kite.", "The cat sleeps on the warm mat.", "Sue bakes a cake with her mom."}
	mems := e.Add(t, "c", texts...)
	p, err := l.Assemble(ctx, Input{Cube: "c", Members: mems, Messages: []Message{{Role: "user", Content: "What does Sue bake?"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pack) == len(texts) || len(p.Pack) == 0 {
		t.Fatalf("pack holds %d of %d memories; budget should cut it", len(p.Pack), len(texts))
	}
	if !slices.ContainsFunc(p.Retrieved, func(m textmem.Memory) bool { return m.Text == texts[3] }) {
		t.Fatalf("retrieval missed the memory: %+v", p.Retrieved)
	}
	if !slices.Equal(p.Tokens[:len(p.PackTokens)], p.PackTokens) {
		t.Fatal("pack is not a prefix of the prompt")
	}
	if want := "\n" + RetrievedText(p.Retrieved) + "What does Sue bake?"; p.Rest != want {
		t.Fatalf("rest %q, want %q", p.Rest, want)
	}
}

// With a chat template the pack is the rendered system turn, a prefix of
// the whole rendering; without a cube there is no pack.
func TestLayoutTemplate(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	mems := e.Add(t, "c", "Lily has a dog.")
	l := New(e.Eng, e.Mem, Options{ChatTemplate: "chatml"})
	p, err := l.Assemble(ctx, Input{Cube: "c", Members: mems, Messages: []Message{{Role: "user", Content: "Hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	head := "<|im_start|>system\n" + DefaultPreamble + "\n- Lily has a dog.\n<|im_end|>\n"
	if p.Head != head || p.Rest != "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("head %q\nrest %q", p.Head, p.Rest)
	}
	plain, err := l.Assemble(ctx, Input{Messages: []Message{{Role: "user", Content: "Hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Head != "" || len(plain.PackTokens) != 0 || plain.Rest != "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("no cube: head %q rest %q", plain.Head, plain.Rest)
	}
}

// Without an engine the layout renders text only and counts bytes/4
// against the budget.
func TestLayoutTextOnly(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	mems := e.Add(t, "c", "Lily has a dog.", "Tom has a kite that is very red and very big.")
	l := New(nil, e.Mem, Options{MaxPackTokens: (len(DefaultPreamble)+3)/4 + 5})
	p, err := l.Assemble(ctx, Input{Cube: "c", Members: mems, Messages: []Message{{Role: "user", Content: "kite"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tokens) != 0 || len(p.Pack) != 1 || len(p.Retrieved) != 1 || p.System != DefaultPreamble+"\n- Lily has a dog.\n" {
		t.Fatalf("text only: %d tokens, pack %d, retrieved %d, system %q", len(p.Tokens), len(p.Pack), len(p.Retrieved), p.System)
	}
	if got := p.Messages[len(p.Messages)-1].Content; got != RetrievedText(p.Retrieved)+"kite" {
		t.Fatalf("last user turn %q", got)
	}
}

// Each retrieved memory's bullet line is tokenized on its own: the span
// RetrievedSpans gives holds exactly LineTokens of the memory, for the last
// turn's block; the rendered text is unchanged.
func TestLayoutRetrievedSpans(t *testing.T) {
	e := testenv.NewEnv(t)
	l := New(e.Eng, e.Mem, Options{MaxPackTokens: 1})
	ctx := context.Background()
	texts := []string{"Lily has a red ball.", "Tom has a big blue kite.", "The cat sleeps on the warm mat.", "Sue bakes a cake with her mom."}
	e.Add(t, "c", texts...)
	msgs := []Message{{Role: "user", Content: "What does Lily have?"}, {Role: "assistant", Content: " A ball."},
		{Role: "user", Content: "What does Sue bake with her mom?"}}
	p, err := l.Assemble(ctx, Input{Cube: "c", Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Retrieved) == 0 || len(p.RetrievedSpans) != len(p.Retrieved) {
		t.Fatalf("%d retrieved, %d spans", len(p.Retrieved), len(p.RetrievedSpans))
	}
	for i, m := range p.Retrieved {
		want, err := l.LineTokens(m)
		if err != nil {
			t.Fatal(err)
		}
		sp := p.RetrievedSpans[i]
		if !slices.Equal(p.Tokens[sp.Start:sp.End], want) {
			t.Fatalf("memory %q: span %v holds %v, line tokens %v", m.Text, sp, p.Tokens[sp.Start:sp.End], want)
		}
		if i > 0 && p.RetrievedSpans[i-1].End != sp.Start {
			t.Fatalf("spans %v not adjacent", p.RetrievedSpans)
		}
	}
	if !strings.Contains(p.Rest, RetrievedText(p.Retrieved)+"What does Sue bake") {
		t.Fatalf("rendered text changed: %q", p.Rest)
	}
	// the pieces read as the text: no space put before a line or the
	// question after it (a SentencePiece vocabulary would add one to a
	// piece tokenized on its own)
	got := e.Eng.Detokenize(p.Tokens[len(p.PackTokens):])
	if got != p.Rest && got != " "+p.Rest {
		t.Fatalf("tokens read %q, the prompt is %q", got, p.Rest)
	}
}
