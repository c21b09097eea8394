package memosrt

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
)

// Feedback that supersedes a memory of the cube's pack goes through the
// edit path: the next tick stores a new pack, whose text holds the
// correction; a chat then reuses it and answers as a cold prefill does.
func TestFeedbackRecomputesPack(t *testing.T) {
	o := openOS(t, testOptions(t, t.TempDir()))
	ctx := context.Background()
	mems := addMemories(t, o, "c", "my dog is Max", "Tom bakes bread on Sunday.")
	if _, err := o.Warm(ctx, "c", WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := o.Packs(ctx, "c")
	if err != nil || len(before.Packs) != 1 {
		t.Fatalf("packs %+v, %v", before, err)
	}
	chat := Request{Cube: "c", Messages: []Message{{Role: "user", Content: "What is my dog called?"}}, NumPredict: 8}
	res, err := o.Chat(ctx, chat)
	if err != nil || !slices.Equal(res.PackMemoryIDs, []string{mems[0].ID, mems[1].ID}) {
		t.Fatalf("chat: %+v, %v", res, err)
	}
	fb, err := o.Feedback(ctx, "c", Feedback{ResponseID: res.ID, Correction: "No, my dog is Rex"})
	if err != nil || fb.Action != FeedbackSuperseded || fb.MemoryID != mems[0].ID || fb.Match != "subject" {
		t.Fatalf("feedback %+v, %v", fb, err)
	}
	o.p.WaitWrites() // the chat's conversation pack is stored in the background
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := o.Packs(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	// the cube's pack (label "c"; the chat left a conversation pack too)
	i := slices.IndexFunc(after.Packs, func(in kvcache.Info) bool { return in.Label == "c" })
	if i < 0 || after.Packs[i].ID == before.Packs[0].ID || len(after.Packs) != 2 {
		t.Fatalf("packs after the tick %+v (before %+v)", after.Packs, before.Packs)
	}
	r := chat
	r.RenderOnly = true
	got, err := o.Chat(ctx, r)
	if err != nil || !strings.HasPrefix(got.Rendered, layout.DefaultPreamble+"\n- my dog is Rex\n- Tom bakes bread on Sunday.\n") || strings.Contains(got.Rendered, "Max") {
		t.Fatalf("rendered %q, %v", got.Rendered, err)
	}
	chat.NoPersist = true
	warm, err := o.Chat(ctx, chat)
	if err != nil {
		t.Fatal(err)
	}
	chat.NoCache = true
	cold, err := o.Chat(ctx, chat)
	if err != nil {
		t.Fatal(err)
	}
	if warm.Usage.CachedTokens == 0 || warm.Text != cold.Text {
		t.Fatalf("after the tick: %d cached tokens, %q; cold %q", warm.Usage.CachedTokens, warm.Text, cold.Text)
	}
}
