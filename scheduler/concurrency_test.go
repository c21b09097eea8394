package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// TestConcurrentRunWarmDelete: generations, pack warms and memory adds and
// deletes run at once on one cube (three sequences). Afterwards every pack
// of the cube is whole, a cached run gives the cold run's greedy output,
// and another cube is untouched: same memories, same pack, same output.
func TestConcurrentRunWarmDelete(t *testing.T) {
	ctx := context.Background()
	e := newEnvWith(t, runtime.Options{NCtx: 1024, NSeqMax: 3, Threads: 2})
	mem, kv, r := e.mem, e.kv, e.r
	for _, s := range []string{"Lily has a dog named Max.", "Max likes to run in the park."} {
		if _, err := mem.Add(ctx, "a", textmem.Memory{Text: s}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mem.Add(ctx, "b", textmem.Memory{Text: "Tom has a red kite."}); err != nil {
		t.Fatal(err)
	}
	bPack, _, err := r.Warm(ctx, "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	bList, _ := mem.List(ctx, "b")
	run := func(cube string, seq int, noCache bool) RunResult {
		res, err := r.Run(ctx, RunRequest{Cube: cube, Seq: seq, Prompt: "Once upon a time", NoCache: noCache, WarmOnMiss: !noCache, MaxTokens: 24})
		if err != nil {
			t.Error(err)
		}
		return res
	}
	bCold := run("b", 0, true)

	var wg sync.WaitGroup
	wg.Go(func() {
		for range 6 {
			run("a", 0, false)
		}
	})
	wg.Go(func() {
		for range 6 {
			if _, _, err := r.Warm(ctx, "a", 1); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for i := range 8 {
			m, err := mem.Add(ctx, "a", textmem.Memory{Text: fmt.Sprintf("Note %d: the sky was %d shades of blue.", i, i)})
			if err != nil {
				t.Error(err)
				continue
			}
			if i%2 == 0 {
				if err := mem.Delete(ctx, "a", m.ID); err != nil {
					t.Error(err)
				}
			}
			// drop a pack of the cube now and then, as a refusal would
			if infos := kv.List("a"); i%3 == 0 && len(infos) > 0 {
				kv.Delete(infos[0].ID)
			}
		}
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	for _, in := range kv.List("") {
		blob, err := kv.Blob(in.ID)
		if err == nil {
			_, _, err = kvcache.Decode(blob)
		}
		if err != nil {
			t.Errorf("pack %.12s of %s: %v", in.ID, in.Label, err)
		}
	}
	warm, cold := run("a", 2, false), run("a", 2, true)
	if warm.Text != cold.Text || warm.Restored.Refused != nil {
		t.Fatalf("cube a after the storm: cached %q (refused %v), cold %q", warm.Text, warm.Restored.Refused, cold.Text)
	}
	if list, _ := mem.List(ctx, "a"); len(list) != 2+4 {
		t.Fatalf("cube a holds %d memories, want 6", len(list))
	}
	if list, _ := mem.List(ctx, "b"); !slices.EqualFunc(list, bList, func(x, y textmem.Memory) bool { return x.ID == y.ID && x.Text == y.Text }) {
		t.Fatalf("cube b changed: %+v", list)
	}
	if !slices.ContainsFunc(kv.List("b"), func(i kvcache.Info) bool { return i.ID == bPack.ID }) {
		t.Fatal("cube b's pack is gone")
	}
	if got := run("b", 1, false); got.Text != bCold.Text || got.Restored.PackID != bPack.ID {
		t.Fatalf("cube b: %q from pack %.12s, cold %q", got.Text, got.Restored.PackID, bCold.Text)
	}
}
