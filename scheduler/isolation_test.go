package scheduler

import (
	"context"
	"testing"

	"github.com/memosrt/memosrt/textmem"
)

// TestPacksStayInTheirCube: a run in one cube never restores another
// cube's pack. Without scoping, the restored length reported as CachedTokens
// would tell a cube that guesses another cube's memory text, token by token,
// how much of the guess is right ("PIN 4821" restored 63 tokens, "PIN 1111"
// 57); kvcache seeds each cube's prefix chain with its scope.
func TestPacksStayInTheirCube(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, s := range []string{"Alice's PIN is 4821.", "Alice likes tea."} {
		if _, err := e.mem.Add(ctx, "alice", textmem.Memory{Text: s}); err != nil {
			t.Fatal(err)
		}
	}
	alice, _, err := e.r.Warm(ctx, "alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, guess := range []string{"Alice's PIN is 4821.", "Alice's PIN is 1111."} {
		if _, err := e.mem.Add(ctx, "mallory", textmem.Memory{Text: guess}); err != nil {
			t.Fatal(err)
		}
		res, err := e.r.Run(ctx, RunRequest{Cube: "mallory", Prompt: "hi", MaxTokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		if res.Restored.PackID == alice.ID {
			t.Errorf("guess %q: cube mallory restored cube alice's pack (%d cached tokens)", guess, res.CachedTokens)
		}
		if err := e.mem.DeleteCube(ctx, "mallory"); err != nil {
			t.Fatal(err)
		}
	}
}
