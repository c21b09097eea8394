package memosrt

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/scheduler"
)

// parametricOptions are test options on a moved clock with the
// parametric tier on (horizon 48 h at heat 5, the scheduler's default
// thresholds; MaxRAM maxRAM, 0 the default).
func parametricOptions(t *testing.T, maxRAM int64) (Options, *fakeClock) {
	t.Helper()
	clock := &fakeClock{t: epoch}
	opts := testOptions(t, t.TempDir())
	opts.Clock = clock
	opts.Tiers.Parametric = scheduler.ParametricOptions{Enabled: true, For: 48 * time.Hour, MaxRAM: maxRAM,
		Distill: lora.DistillOptions{Threads: 1}}
	return opts, clock
}

// parametricOS is an OS opened with parametricOptions.
func parametricOS(t *testing.T) (*OS, *fakeClock) {
	t.Helper()
	opts, clock := parametricOptions(t, 0)
	return openOS(t, opts), clock
}

// warmPastHorizon pins cube's memories (a warm: hot from the next tick),
// ticks, moves the clock past the 48-hour horizon and ticks again, which
// plans the distillation and starts it in the background.
func warmPastHorizon(t *testing.T, o *OS, clock *fakeClock, cube string) {
	t.Helper()
	ctx := context.Background()
	if _, err := o.Warm(ctx, cube, WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Advance(49 * time.Hour)
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitDistilled waits for cube's distillation to attach an adapter or to
// record a failure and returns the tier state then. Training runs in the
// background; 30 minutes bound a hang, not the speed (it takes seconds to
// minutes on 2 busy vCPUs).
func waitDistilled(t *testing.T, o *OS, cube string) scheduler.CubeTiers {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, err := o.Tiers(context.Background(), cube, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p := st.Parametric; p != nil && (p.Adapter != "" || p.Failure != "") {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the distillation did not end: %+v", st.Parametric)
		}
	}
}

// recall generates greedily from the first words of text, the memory not
// in the prompt (raw: no template, no memories), in cube.
func recall(t *testing.T, o *OS, cube, prompt string, n int) *Response {
	t.Helper()
	res, err := o.Generate(context.Background(), Request{Cube: cube, Prompt: prompt, Raw: true, NumPredict: n, Record: RecordNone, NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A memory used steadily past the horizon is distilled into the cube's
// adapter: it moves to the parametric tier (recorded), leaves the pack,
// the adapter is attached to the cube's requests by default and carries
// the memory (greedy recall from its first half, memory not in the
// prompt; the gate's NLL figures); deleting it retires the adapter at
// the next tick.
func TestParametricTier(t *testing.T) {
	o, clock := parametricOS(t)
	ctx := context.Background()
	const text = "Lily has a red ball named Bob."
	const head, tail = "Lily has a red", " ball named Bob."
	mems := addMemories(t, o, "c", text, "Tom keeps his blue car under the big bed.")
	ball := mems[0].ID
	addMemories(t, o, "d", "Tom keeps his blue car under the big bed.")
	if before := recall(t, o, "c", head, 5); strings.HasPrefix(before.Text, tail) || before.Adapters != "" {
		t.Fatalf("the base model already completes %q with %q (adapters %q)", head, before.Text, before.Adapters)
	}
	use := func() {
		t.Helper()
		res, err := o.Chat(ctx, Request{Cube: "c", Messages: []Message{{Role: "user", Content: "Where is the red ball Bob?"}}, NumPredict: 4, Record: RecordNone})
		if err != nil {
			t.Fatal(err)
		}
		if res.Retrieved+res.PackMemories == 0 {
			t.Fatalf("the chat used no memory")
		}
		if _, err := o.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tier := func(id string) string {
		st, err := o.Tiers(ctx, "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range st.Memories {
			if m.ID == id {
				return m.Tier
			}
		}
		return ""
	}
	for range 3 {
		use()
	}
	if got := tier(ball); got != scheduler.TierActivation {
		t.Fatalf("after 3 uses the ball is in the %s tier, want activation", got)
	}
	// steady use, one chat every 6 hours: still in the activation tier
	// until the 48-hour horizon passes
	for h := 6; h < 48; h += 6 {
		clock.Advance(6 * time.Hour)
		// a tick in the pause: the heat has dipped under 5 (interactions
		// decayed by e^(−1/4)), not under the demotion heat 1
		if _, err := o.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		use()
		if st, _ := o.Tiers(ctx, "c", 0); len(st.Jobs) > 0 && st.Jobs[0].Kind == scheduler.JobDistill {
			t.Fatalf("a distillation was planned after %d hours, before the 48-hour horizon", h)
		}
	}
	clock.Advance(6 * time.Hour)
	use() // plans the distillation and starts it in the background
	st := waitDistilled(t, o, "c")
	p := st.Parametric
	if p.Adapter == "" {
		t.Fatalf("distillation refused: %s (eval %+v)", p.Failure, p.Eval)
	}
	t.Logf("adapter %s v%d: %d memories, %d bytes, %.1f s; memory NLL %.3f → %.3f (−%.0f%%), recalled %d/%d, generic top-1 %.1f%% KL %.4f over %d positions",
		p.Adapter, p.Version, p.Members, p.Bytes, p.Seconds, p.Eval.NLLBase, p.Eval.NLLAdapter, 100*p.Eval.NLLDrop(), p.Eval.Recalled, p.Eval.Memories,
		100*p.Eval.Top1, p.Eval.KL, p.Eval.Positions)
	if p.Version != 1 || p.Members != 1 || p.Eval.NLLDrop() < 0.25 || p.Eval.Recalled != 1 || !p.Eval.Passed {
		t.Fatalf("parametric tier %+v, eval %+v", p, p.Eval)
	}
	if got := tier(ball); got != scheduler.TierParametric {
		t.Fatalf("the ball is in the %s tier, want parametric", got)
	}
	var moved *scheduler.Transition
	for i, tr := range st.Transitions {
		if tr.Memory == ball && tr.To == scheduler.TierParametric {
			moved = &st.Transitions[i]
		}
	}
	if moved == nil || moved.From != scheduler.TierActivation || moved.Reason != "distilled" {
		t.Fatalf("no activation → parametric transition of the ball: %+v", st.Transitions)
	}
	if _, err := o.Tick(ctx); err != nil { // the pack leaves the ball
		t.Fatal(err)
	}
	members, _, _, err := o.p.Scheduler().Membership("c")
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(members, ball) {
		t.Fatalf("the pack still holds the distilled memory: %v", members)
	}
	if got := recall(t, o, "c", head, 8); !strings.HasPrefix(got.Text, tail) || got.Adapters != p.Adapter+":1" {
		t.Fatalf("with the cube's adapter %q: %q continues as %q (adapters %q), want %q", p.Adapter, head, got.Text, got.Adapters, tail)
	}
	if other := recall(t, o, "d", head, 5); other.Adapters != "" {
		t.Fatalf("cube d got adapters %q", other.Adapters)
	}
	recs, err := o.AdapterRegistry().Defaults(ctx, "c")
	if err != nil || len(recs) != 1 || recs[0].RefName() != p.Adapter {
		t.Fatalf("registry defaults of c: %+v %v", recs, err)
	}
	path := recs[0].Path

	// deleting the memory retires the adapter within one tick
	if err := o.DeleteMemory(ctx, "c", ball); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = o.Tiers(ctx, "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Parametric.Adapter != "" || st.Parametric.Members != 0 {
		t.Fatalf("after the delete and a tick: %+v", st.Parametric)
	}
	if recs, _ := o.AdapterRegistry().Defaults(ctx, "c"); len(recs) != 0 {
		t.Fatalf("the retired adapter is still registered: %+v", recs)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the retired adapter file %s: %v", path, err)
	}
	if got := recall(t, o, "c", head, 5); got.Adapters != "" {
		t.Fatalf("after the delete the cube's request attached %q", got.Adapters)
	}
	var retired bool
	for _, tr := range st.Transitions {
		retired = retired || tr.Memory == ball && tr.From == scheduler.TierParametric && tr.To == scheduler.TierText && tr.Reason == "deleted"
	}
	if !retired {
		t.Fatalf("no parametric → text transition for the deleted memory: %+v", st.Transitions)
	}
}

// Memories a user pinned (a warm) count as hot: after the horizon both are
// distilled into version 1. Changing one retires that adapter at the next
// tick (nothing answers from the old text) and the same tick's job trains
// version 2 from the unchanged one alone; the changed memory starts its
// horizon again in the text tier.
func TestParametricRetrain(t *testing.T) {
	o, clock := parametricOS(t)
	ctx := context.Background()
	mems := addMemories(t, o, "c", "Lily has a red ball named Bob.", "Tom keeps his blue car under the big bed.")
	ball, car := mems[0].ID, mems[1].ID
	tick := func() {
		t.Helper()
		if _, err := o.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	state := func() scheduler.CubeTiers {
		t.Helper()
		st, err := o.Tiers(ctx, "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	wait := func(version int) *scheduler.Parametric {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			p := state().Parametric
			if p.Version >= version && !p.Distilling && len(state().Jobs) == 0 {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("no version %d: %+v", version, p)
			}
		}
	}
	warmPastHorizon(t, o, clock, "c")
	p := wait(1)
	if p.Adapter == "" || p.Members != 2 {
		t.Fatalf("version 1: %+v (eval %+v)", p, p.Eval)
	}
	if _, err := o.UpdateMemory(ctx, "c", ball, "Lily has a green kite named Sky."); err != nil {
		t.Fatal(err)
	}
	tick()
	st := state()
	reasons := map[string]string{}
	for _, tr := range st.Transitions {
		if tr.From == scheduler.TierParametric {
			reasons[tr.Memory] = tr.Reason
		}
	}
	if reasons[ball] != "changed" || reasons[car] != "retrained" {
		t.Fatalf("after the change and a tick: transitions out of the parametric tier %v", reasons)
	}
	if st.Parametric.Adapter != "" && st.Parametric.Version == 1 {
		t.Fatalf("version 1 still attached after the change: %+v", st.Parametric)
	}
	p = wait(2)
	if p.Adapter == "" || p.Members != 1 || p.Version != 2 {
		t.Fatalf("version 2: %+v (eval %+v)", p, p.Eval)
	}
	tiers := map[string]string{}
	for _, m := range state().Memories {
		tiers[m.ID] = m.Tier
	}
	if tiers[car] != scheduler.TierParametric || tiers[ball] == scheduler.TierParametric {
		t.Fatalf("after the retrain: car %s, ball %s", tiers[car], tiers[ball])
	}
	recs, err := o.AdapterRegistry().Defaults(ctx, "c")
	if err != nil || len(recs) != 1 || recs[0].RefName() != p.Adapter || !strings.HasSuffix(recs[0].Path, "v2.gguf") {
		t.Fatalf("registry: %+v %v", recs, err)
	}
}

// A distillation cut short by Close (a stop, a crash) stays pending in
// Badger and the next process trains it at its first tick: the job is
// persisted and resumed (trained again from the start: one run takes
// seconds to minutes, and its steps are not checkpointed).
func TestParametricResumes(t *testing.T) {
	opts, clock := parametricOptions(t, 0)
	ctx := context.Background()
	o, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	addMemories(t, o, "c", "Lily has a red ball named Bob.")
	warmPastHorizon(t, o, clock, "c")    // starts the training
	if err := o.Close(ctx); err != nil { // cancels it
		t.Fatal(err)
	}
	o = openOS(t, opts)
	st, err := o.Tiers(ctx, "c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 1 || st.Jobs[0].Kind != scheduler.JobDistill || st.Parametric.Adapter != "" {
		t.Fatalf("after the stop: jobs %+v, parametric %+v", st.Jobs, st.Parametric)
	}
	if _, err := o.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	st = waitDistilled(t, o, "c")
	if st.Parametric.Adapter == "" || st.Parametric.Version != 1 || len(st.Jobs) != 0 {
		t.Fatalf("after the restart: %+v, jobs %+v", st.Parametric, st.Jobs)
	}
}

// A job whose one memory passes the RAM budget (lora.DistillRAM's
// estimate) trains nothing and records why; no adapter is attached.
func TestParametricRAMBudget(t *testing.T) {
	opts, clock := parametricOptions(t, 1<<20)
	o := openOS(t, opts)
	ctx := context.Background()
	addMemories(t, o, "c", "Lily has a red ball named Bob.")
	warmPastHorizon(t, o, clock, "c")
	st := waitDistilled(t, o, "c")
	if !strings.HasPrefix(st.Parametric.Failure, "RAM: one memory needs an estimated") || st.Parametric.Adapter != "" || len(st.Jobs) != 0 {
		t.Fatalf("over the RAM budget: %+v, jobs %+v", st.Parametric, st.Jobs)
	}
	if recs, _ := o.AdapterRegistry().Defaults(ctx, "c"); len(recs) != 0 {
		t.Fatalf("registered: %+v", recs)
	}
}

// A training copy a crash left in a cube's adapter directory (lora.Distill
// writes it there for an f16 or quantized base and removes it itself) is
// removed when the OS opens.
func TestParametricStaleTrainingCopy(t *testing.T) {
	opts, _ := parametricOptions(t, 0)
	stale := filepath.Join(opts.Dir, "adapters", "c", ".train-123.gguf")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	openOS(t, opts)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale training copy is still there: %v", err)
	}
}
