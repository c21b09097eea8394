package lora

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime/llama"
)

// Evaluate measures an adapter on the memories and on 4 generic texts of
// 64 tokens the base writes (4 × 63 next-token positions), and its gate
// refuses an adapter that has not learnt the memories, saying why.
func TestEvaluate(t *testing.T) {
	llama.Init("")
	ctx := context.Background()
	model := testmodels.Stories(t)
	p := filepath.Join(t.TempDir(), "a.gguf")
	if err := WriteRandom(ctx, p, model, RandomSpec{Seed: 1, Std: 0.01}); err != nil {
		t.Fatal(err)
	}
	mems := []string{"Lily has a red ball named Bob.", "Tom keeps his blue car under the big bed."}
	ev, err := Evaluate(ctx, model, p, mems, GateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", ev)
	if ev.Memories != 2 || len(ev.PerMemory) != 2 || ev.Positions != 4*63 {
		t.Fatalf("counts: %+v", ev)
	}
	if ev.NLLBase <= 0 || ev.NLLAdapter <= 0 || ev.KL < 0 || ev.Top1 <= 0 || ev.Top1 > 1 {
		t.Fatalf("figures out of range: %+v", ev)
	}
	if ev.Passed || !strings.HasPrefix(ev.Reason, "memory NLL") {
		t.Fatalf("a random adapter passed the gate or failed it for another reason: %+v", ev)
	}
	// the same adapter at memory bars it meets (negative: none), and a
	// generic top-1 bar no adapter meets
	loose, err := Evaluate(ctx, model, p, mems, GateOptions{MinNLLDrop: -10, MinRecall: -1, MinTop1: 1.01})
	if err != nil {
		t.Fatal(err)
	}
	if loose.Passed || !strings.HasPrefix(loose.Reason, "generic top-1") || loose.NLLBase != ev.NLLBase || loose.KL != ev.KL {
		t.Fatalf("second evaluation: %+v, first %+v", loose, ev)
	}
	if _, err := Evaluate(ctx, model, filepath.Join(t.TempDir(), "none.gguf"), mems, GateOptions{}); err == nil {
		t.Fatal("a missing adapter file evaluated")
	}
	if _, err := Evaluate(ctx, model, p, nil, GateOptions{}); err == nil {
		t.Fatal("no memories evaluated")
	}
}
