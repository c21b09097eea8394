package scheduler

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/textmem"
)

// A cube with one pending job holds two uncommitted tier packs at a
// restart: the job's (stored, then the process died before its commit) and
// a warm's cut short while the job was pending. The restart keeps the
// committed pack and the job's alone; the job then commits its pack
// without decoding it again. (Crash harness, MEMOSRT_CRASH_SEED=700578165:
// the warm's pack stayed until the job committed.)
func TestRestartKeepsPendingJobPackOnly(t *testing.T) {
	e := testenv.NewEnv(t)
	ctx := context.Background()
	mems := e.Add(t, "c", "Lily has a dog named Max.", "Max likes the park.", "Tom has a red kite.")
	lay := layout.New(e.Eng, e.Mem, layout.Options{})
	kv, err := kvcache.Open(e.DB, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	errKilled := errors.New("killed")
	tr, err := NewTiers(Deps{DB: e.DB, Mem: e.Mem, KV: kv, Layout: lay, Engine: e.Eng},
		TierOptions{AfterPut: func(Job) error { return errKilled }})
	if err != nil {
		t.Fatal(err)
	}
	// committed: a pack of mems[0], pinned (no cold demotion is planned)
	committed, err := tr.Promote(ctx, "c", []string{mems[0].ID}, "warm", true, false)
	if err != nil {
		t.Fatal(err)
	}
	packID := func(ms ...textmem.Memory) string {
		t.Helper()
		p, err := lay.Pack(ctx, "c", ms)
		if err != nil {
			t.Fatal(err)
		}
		return kvcache.PackID(tr.packKey("c", ""), p.PackTokens)
	}
	jobPack, warmPack := packID(mems[0], mems[1]), packID(mems[0], mems[2])
	// the job stores its pack and dies before its commit: it stays pending
	if _, err := tr.enqueue(ctx, []Job{{Kind: JobPromote, Cube: "c", Memory: mems[1].ID, Reason: "heat", Heat: 1, Created: tr.opts.Clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	if rep, err := tr.Tick(ctx); !errors.Is(err, errKilled) || rep.Failed != 1 {
		t.Fatalf("tick with the job killed: %+v %v", rep, err)
	}
	// a warm of mems[2] stores its pack and dies before its commit
	p, err := lay.Pack(ctx, "c", []textmem.Memory{mems[0], mems[2]})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tr.computePack(ctx, "c", p.PackTokens, nil, true); err != nil {
		t.Fatal(err)
	}
	ids := func(kv *kvcache.Cache) []string {
		var out []string
		for _, i := range kv.List("c") {
			out = append(out, i.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	if got, want := ids(kv), sorted(committed.Pack.ID, jobPack, warmPack); !slices.Equal(got, want) {
		t.Fatalf("before the restart: packs %.12q, want %.12q (committed, job's, warm's)", got, want)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if err := kv.Close(); err != nil {
		t.Fatal(err)
	}

	kv, err = kvcache.Open(e.DB, kvcache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	tr, err = NewTiers(Deps{DB: e.DB, Mem: e.Mem, KV: kv, Layout: lay, Engine: e.Eng}, TierOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if got, want := ids(kv), sorted(committed.Pack.ID, jobPack); !slices.Equal(got, want) {
		t.Fatalf("after the restart: packs %.12q, want %.12q (committed, job's)", got, want)
	}
	if jobs, err := tr.Jobs(ctx); err != nil || len(jobs) != 1 {
		t.Fatalf("pending jobs after the restart: %+v %v", jobs, err)
	}
	if rep, err := tr.Tick(ctx); err != nil || rep.Done != 1 {
		t.Fatalf("tick after the restart: %+v %v", rep, err)
	}
	st, err := tr.State(ctx, "c", 1)
	if err != nil || st.PackID != jobPack || len(st.Transitions) != 1 || st.Transitions[0].Decoded != 0 {
		t.Fatalf("after the job: pack %.12s, transitions %+v (%v), want pack %.12s restored whole", st.PackID, st.Transitions, err, jobPack)
	}
	if got, want := ids(kv), []string{jobPack}; !slices.Equal(got, want) {
		t.Fatalf("after the job: packs %.12q, want %.12q", got, want)
	}
}
