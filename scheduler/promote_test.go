package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/layout"
)

// While one pack computation holds the job lock, MaxPromoteQueue Promotes
// wait for it and the next is refused at once with ErrBusy, doing
// nothing; once the lock is free the waiting ones complete.
func TestPromoteQueueBound(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	_, tr := tiersOn(t, e, layout.Options{}, TierOptions{MaxPromoteQueue: 2})
	cubes := []string{"a", "b", "c"}
	ids := map[string][]string{}
	for _, c := range cubes {
		for _, m := range e.Add(t, c, "Lily has a dog named Max.", "Max likes the park.") {
			ids[c] = append(ids[c], m.ID)
		}
	}
	tr.jobMu.Lock() // a running computation
	errs := make(chan error, 2)
	for _, c := range cubes[:2] {
		go func() {
			_, err := tr.Promote(ctx, c, ids[c], "warm", true, false)
			errs <- err
		}()
	}
	waitPromoting(t, tr, 2)
	// promoting counts the waiting ones; the lock's holder here is the
	// test, so one more may still wait, and the one after is refused
	go func() {
		_, err := tr.Promote(ctx, "c", ids["c"], "warm", true, false)
		errs <- err
	}()
	waitPromoting(t, tr, 3)
	if _, err := tr.Promote(ctx, "c", ids["c"], "warm", true, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("a fourth Promote: %v, want ErrBusy", err)
	}
	tr.jobMu.Unlock()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cubes {
		st, err := tr.State(ctx, c, 0)
		if err != nil || st.PackID == "" || len(st.Memories) != 2 || st.Memories[0].Tier != TierActivation {
			t.Fatalf("cube %s after its Promote: %+v %v", c, st, err)
		}
	}
}

// waitPromoting waits until want Promotes are counted as running or
// waiting.
func waitPromoting(t *testing.T, tr *Tiers, want int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		tr.runMu.Lock()
		n := tr.promoting
		tr.runMu.Unlock()
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Promotes waiting, want %d", n, want)
		}
	}
}

// A promotion refused because its memory does not fit the pack's
// MaxPackTokens leaves no pending job behind: before, the job stayed in
// s/j/ and every Tick laid it out and refused it again, so a cube whose
// pack was full kept one job record for each hot memory outside it
// (thousands in a 10-minute `make soak`).
func TestRefusedPromotionLeavesNoJob(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	texts := []string{"Lily has a dog named Max.", "Max likes to run in the park with Lily every day.", "Tom has a red kite."}
	mems := e.Add(t, "c", texts...)
	// room for the preamble and the first memory only
	probe := layout.New(e.Eng, e.Mem, layout.Options{})
	one, err := probe.Pack(ctx, "c", mems[:1])
	if err != nil {
		t.Fatal(err)
	}
	_, tr := tiersOn(t, e, layout.Options{MaxPackTokens: len(one.PackTokens) + 2}, TierOptions{})
	var ids []string
	for _, m := range mems {
		ids = append(ids, m.ID)
	}
	for range 6 { // heat 6 each, over PromoteAt (5)
		if err := tr.RecordInteractions(ctx, "c", ids...); err != nil {
			t.Fatal(err)
		}
	}
	other := e.Add(t, "e", "Tom has a red kite.")
	for tick := range 3 {
		rep, err := tr.Tick(ctx)
		if err != nil {
			t.Fatalf("tick %d: %v", tick, err)
		}
		jobs, err := tr.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 0 {
			t.Fatalf("tick %d (%+v): %d jobs pending, want 0: %+v", tick, rep, len(jobs), jobs)
		}
		// refused for the pack's tokens: not planned again within a
		// minute while that pack stays, though another cube's pack
		// changes the committed bytes
		if tick > 0 && rep.Planned != 0 {
			t.Fatalf("tick %d: %+v, want nothing planned", tick, rep)
		}
		if tick == 0 {
			if _, err := tr.Promote(ctx, "e", []string{other[0].ID}, "warm", true, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := tr.State(ctx, "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	var in []string
	for _, m := range st.Memories {
		if m.Tier == TierActivation {
			in = append(in, m.ID)
		}
	}
	if len(in) != 1 || in[0] != mems[0].ID {
		t.Fatalf("activation tier %v, want [%s]", in, mems[0].ID)
	}
}

// While background jobs cannot get KV cells (requests hold them: Reserve
// defers), at most maxPendingPromotions promotions wait for a cube, the
// hottest; the rest are planned again at a later Tick. Before, every hot
// memory kept a job record until its job ran.
func TestPendingPromotionsBounded(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	busy := func(context.Context, int, bool) (func(), error) {
		return nil, fmt.Errorf("%w: cells busy", ErrDeferred)
	}
	_, tr := tiersOn(t, e, layout.Options{}, TierOptions{Reserve: busy})
	var texts []string
	for i := range 3 * maxPendingPromotions {
		texts = append(texts, fmt.Sprintf("Memory number %d is about a red kite.", i))
	}
	mems := e.Add(t, "c", texts...)
	d := e.Add(t, "d", "Tom has a red kite.") // another cube's promotions are counted apart
	// memory i used 6+i times: all over PromoteAt (5), the last the hottest
	for i, m := range mems {
		if err := tr.RecordUse(ctx, Uses("c", []string{m.ID}, 0, 6+i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.RecordUse(ctx, Uses("d", []string{d[0].ID}, 0, 6)); err != nil {
		t.Fatal(err)
	}
	var want []string // the hottest, hottest first
	for i := len(mems) - 1; i >= len(mems)-maxPendingPromotions; i-- {
		want = append(want, mems[i].ID)
	}
	for tick := range 2 {
		rep, err := tr.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := tr.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		nd := 0
		for _, j := range jobs {
			switch {
			case j.Kind != JobPromote:
				t.Fatalf("tick %d: job %+v", tick, j)
			case j.Cube == "d":
				nd++
			default:
				got = append(got, j.Memory)
			}
		}
		if !slices.Equal(got, want) || nd != 1 || rep.Deferred != maxPendingPromotions+1 {
			t.Fatalf("tick %d (%+v): cube c's pending promotions %v, want the %d hottest %v; cube d's %d, want 1", tick, rep, got, maxPendingPromotions, want, nd)
		}
	}
}
