package scheduler

import (
	"context"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
)

// gcEnv is a tier scheduler over a real engine, text store and KV cache.
func gcEnv(t *testing.T) (*testenv.Env, *kvcache.Cache, *Tiers) {
	t.Helper()
	e := testenv.NewEnv(t)
	kv, tr := tiersOn(t, e, layout.Options{}, TierOptions{})
	return e, kv, tr
}

// tiersOn opens a KV cache and a tier scheduler over e's engine, text
// store and data directory, closed at the end of the test.
func tiersOn(t *testing.T, e *testenv.Env, lo layout.Options, to TierOptions) (*kvcache.Cache, *Tiers) {
	t.Helper()
	kv, err := kvcache.Open(e.DB, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kv.Close() })
	tr, err := NewTiers(Deps{DB: e.DB, Mem: e.Mem, KV: kv, Layout: layout.New(e.Eng, e.Mem, lo), Engine: e.Eng}, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Error(err)
		}
	})
	return kv, tr
}

// A garbage collection that read the pack marks before a cube's pack
// became garbage and was then recomputed must not delete the recomputed
// pack that the cube's committed state names again. Cube a's pack P1
// ({m1}) is replaced by P2 ({m1, m2}): the commit marks P1; its
// collection (paused) and cube b's delete's collection (paused) both start;
// a's deletes P1; m2 is deleted and the next tick's demotion brings a's
// pack back to {m1}, P1, computed and committed again; then b's collection
// ends. Before collections read the marks and the committed states under
// gcMu, b's deleted P1 from a stale view: a's state named a pack that was
// not stored (the fault TestBackupUnderLoad saw in a backup).
func TestCollectionKeepsPackCommittedAgain(t *testing.T) {
	e, kv, tr := gcEnv(t)
	ctx := context.Background()
	a := e.Add(t, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	b := e.Add(t, "b", "Tom has a red kite.")
	p1, err := tr.Promote(ctx, "a", []string{a[0].ID}, "warm", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Promote(ctx, "b", []string{b[0].ID}, "warm", true, false); err != nil {
		t.Fatal(err)
	}

	// the first two collections pause before deleting
	var mu sync.Mutex
	calls := 0
	paused := make(chan int)
	resume := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	tr.gcHook = func() {
		mu.Lock()
		n := calls
		calls++
		mu.Unlock()
		if n < 2 {
			paused <- n
			<-resume[n]
		}
	}
	promoted := make(chan error, 1)
	go func() {
		_, err := tr.Promote(ctx, "a", []string{a[1].ID}, "warm", true, false)
		promoted <- err
	}()
	if n := <-paused; n != 0 {
		t.Fatalf("collection %d paused first", n)
	}
	deleted := make(chan error, 1)
	go func() { deleted <- tr.DeleteCube(ctx, "b") }()
	if n := <-paused; n != 1 {
		t.Fatalf("collection %d paused second", n)
	}
	close(resume[0])
	if err := <-promoted; err != nil {
		t.Fatal(err)
	}
	if _, ok := kv.Info(p1.Pack.ID); ok {
		t.Fatalf("pack %.12s replaced by a's second warm is still stored", p1.Pack.ID)
	}

	// back to {m1}: P1 again
	if err := e.Mem.Delete(ctx, "a", a[1].ID); err != nil {
		t.Fatal(err)
	}
	if rep, err := tr.Tick(ctx); err != nil || rep.Done != 1 {
		t.Fatalf("tick: %+v %v", rep, err)
	}
	st, err := tr.State(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.PackID != p1.Pack.ID {
		t.Fatalf("a's pack after the demotion: %.12s, want %.12s (P1 again)", st.PackID, p1.Pack.ID)
	}

	close(resume[1])
	if err := <-deleted; err != nil {
		t.Fatal(err)
	}
	st, err = tr.State(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kv.Info(st.PackID); st.PackID != p1.Pack.ID || !ok {
		t.Fatalf("a's tier state names pack %.12s (stored %v), want %.12s stored", st.PackID, ok, p1.Pack.ID)
	}
	if got := kv.List("b"); len(got) != 0 {
		t.Fatalf("deleted cube b still has %d packs", len(got))
	}
}

// A tier state naming a pack the KV cache no longer stores (a restore or
// a repair deleted it as damaged) is not warm: State reports no level,
// HotPacks leaves it out, Activate does nothing, and the next Tick computes
// the same pack again ("missing"), after which it is warm again.
func TestMissingPackIsRecomputed(t *testing.T) {
	e, kv, tr := gcEnv(t)
	ctx := context.Background()
	a := e.Add(t, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	p, err := tr.Promote(ctx, "a", []string{a[0].ID, a[1].ID}, "warm", true, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(p.Pack.ID); err != nil {
		t.Fatal(err)
	}
	st, err := tr.State(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.PackID != p.Pack.ID || st.PackLevel != "" {
		t.Fatalf("state with its pack deleted: pack %.12s level %q, want %.12s at no level", st.PackID, st.PackLevel, p.Pack.ID)
	}
	hot, err := tr.HotPacks(ctx)
	if err != nil || len(hot) != 0 {
		t.Fatalf("hot packs with the only one deleted: %+v %v", hot, err)
	}
	if err := tr.Activate(ctx, "a"); err != nil {
		t.Fatalf("activate a cube whose pack is deleted: %v", err)
	}
	rep, err := tr.Tick(ctx)
	if err != nil || rep.Planned != 1 || rep.Done != 1 {
		t.Fatalf("tick: %+v %v, want one job planned and done", rep, err)
	}
	st, err = tr.State(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kv.Info(p.Pack.ID); st.PackID != p.Pack.ID || !ok || st.PackLevel == "" || len(st.Jobs) != 0 {
		t.Fatalf("after the tick: pack %.12s (stored %v) level %q, %d jobs; want %.12s stored again",
			st.PackID, ok, st.PackLevel, len(st.Jobs), p.Pack.ID)
	}
	if hot, err := tr.HotPacks(ctx); err != nil || len(hot) != 1 || hot[0].PackID != p.Pack.ID {
		t.Fatalf("hot packs after the tick: %+v %v", hot, err)
	}
}

// A job whose pack is deleted between its computation and its commit (a
// collection deleting it as garbage) does not commit a state naming it:
// it stays pending (deferred), and the next Tick computes and commits it.
func TestJobCommitRefusedForDeletedPack(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	kv, err := kvcache.Open(e.DB, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	lay := layout.New(e.Eng, e.Mem, layout.Options{})
	a := e.Add(t, "a", "Lily has a dog named Max.", "Max likes to run in the park.")
	var deleted []string
	var tr *Tiers
	tr, err = NewTiers(Deps{DB: e.DB, Mem: e.Mem, KV: kv, Layout: lay, Engine: e.Eng}, TierOptions{AfterPut: func(j Job) error {
		if len(deleted) > 0 {
			return nil
		}
		for _, i := range kv.List("a") {
			st, err := tr.packState("a")
			if err != nil {
				return err
			}
			if i.ID != st.PackID {
				deleted = append(deleted, i.ID)
				if err := kv.Delete(i.ID); err != nil {
					return err
				}
			}
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := tr.Promote(ctx, "a", []string{a[0].ID}, "warm", true, false); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.enqueue(ctx, []Job{{Kind: JobPromote, Cube: "a", Memory: a[1].ID, Reason: "heat", Heat: 1, Created: tr.opts.Clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	rep, err := tr.Tick(ctx)
	if err != nil || rep.Deferred != 1 || rep.Done != 0 || len(deleted) != 1 {
		t.Fatalf("tick with the job's pack deleted before its commit: %+v %v (%d deleted), want it deferred", rep, err, len(deleted))
	}
	st, err := tr.State(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kv.Info(st.PackID); !ok || len(st.Jobs) != 1 || st.PackID == deleted[0] {
		t.Fatalf("after the refused commit: pack %.12s stored %v, %d jobs pending", st.PackID, ok, len(st.Jobs))
	}
	rep, err = tr.Tick(ctx)
	if err != nil || rep.Done != 1 {
		t.Fatalf("second tick: %+v %v", rep, err)
	}
	st, err = tr.State(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kv.Info(st.PackID); st.PackID != deleted[0] || !ok || len(st.Jobs) != 0 {
		t.Fatalf("after the second tick: pack %.12s stored %v, %d jobs; want %.12s", st.PackID, ok, len(st.Jobs), deleted[0])
	}
}
