package pipeline

import (
	"context"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/textmem"
)

// A pipeline without the facade: a chat turn in a cube goes through every
// stage (its warmed pack shared in from the resident level, the next turn
// reusing the slot), the OnChat hook sees each answered foreground chat
// turn once with the cube's record, and background work and completions
// never reach it.
func TestTurnThroughTheStages(t *testing.T) {
	ctx := context.Background()
	opts := testOptions(t)
	type call struct {
		cube, answer string
		msgs         int
	}
	var mu sync.Mutex
	var calls []call
	p := newTestWith(t, opts, func(_ context.Context, req *Request, cube textmem.Cube, answer string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, call{cube: cube.Name, answer: answer, msgs: len(req.Messages)})
	})
	for _, text := range []string{"Lily has a dog named Max.", "Max likes to run in the park."} {
		if _, _, err := p.cubes.Add(ctx, "c", textmem.Memory{Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Warm(ctx, "c", WarmOptions{Resident: true}); err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Role: "user", Content: "Where does Max run?"}}
	first, err := p.Chat(ctx, Request{Cube: "c", Messages: msgs, NumPredict: 8, NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	if first.CacheSource != SourceResident || first.PackMemories != 2 || first.Usage.CachedTokens == 0 {
		t.Fatalf("first turn: source %q, %d pack memories, %d cached tokens; want the resident pack of 2",
			first.CacheSource, first.PackMemories, first.Usage.CachedTokens)
	}
	msgs = append(msgs, Message{Role: "assistant", Content: first.Text}, Message{Role: "user", Content: "And Lily?"})
	second, err := p.Chat(ctx, Request{Cube: "c", Messages: msgs, NumPredict: 8, NoPersist: true})
	if err != nil {
		t.Fatal(err)
	}
	if second.CacheSource != SourceSlot {
		t.Fatalf("second turn: source %q, want the slot's own prefix", second.CacheSource)
	}
	if _, err := p.Generate(ctx, Request{Cube: "c", Prompt: "Once upon a time", NumPredict: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GenerateBackground(ctx, Request{Prompt: "Once upon a time", Raw: true, NumPredict: 4}); err != nil {
		t.Fatal(err)
	}
	want := []call{{cube: "c", answer: first.Text, msgs: 1}, {cube: "c", answer: second.Text, msgs: 3}}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != len(want) || calls[0] != want[0] || calls[1] != want[1] {
		t.Fatalf("OnChat calls %+v, want %+v", calls, want)
	}
}
