package memosrt

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// An OS opened with OneSequence (what `memosrt run` opens) loads its model
// with one sequence, so a single-stream, non-unified KV cache; a pack warmed
// by an OS with the usual sequences (unified KV) restores into it, and the
// restored output equals a cold prefill. Warm, which needs a tier-job
// sequence, is refused with ErrBadOptions; the pack stays usable.
func TestOneSequenceRestoresUnifiedPack(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOptions(t, dir)
	o := openOS(t, opts)
	addMemories(t, o, "c", "Lily has a dog named Max.", "Max likes to run in the park.", "Lily's favourite food is apple pie.")
	st, err := o.Warm(ctx, "c", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pack := st.Packs[0]
	if got := o.Model().Info["memosrt.n_seq_max"]; got != 5 {
		t.Fatalf("usual OS: n_seq_max %v, want 5 (2 slots, 2 resident, 1 for tier jobs)", got)
	}
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}

	one := opts
	one.OneSequence = true
	one.Parallel = 0 // taken as 1
	o = openOS(t, one)
	if got := o.Model().Info["memosrt.n_seq_max"]; got != 1 {
		t.Fatalf("OneSequence: n_seq_max %v, want 1", got)
	}
	prompt := "Once upon a time, Lily"
	warm := generate(t, o, Request{Cube: "c", Prompt: prompt, NumPredict: 32})
	cold := generate(t, o, Request{Cube: "c", Prompt: prompt, NumPredict: 32, NoCache: true})
	if warm.Usage.CachedTokens != pack.NTokens || warm.CacheSource != SourceRestored || warm.PackID != pack.ID {
		t.Fatalf("restored: cached %d (%s), pack %.12s; want %d from pack %.12s", warm.Usage.CachedTokens, warm.CacheSource, warm.PackID, pack.NTokens, pack.ID)
	}
	if cold.Usage.CachedTokens != 0 || warm.Text != cold.Text {
		t.Fatalf("restored output differs from cold (cached %d):\nwarm %q\ncold %q", cold.Usage.CachedTokens, warm.Text, cold.Text)
	}

	addMemories(t, o, "d", "Tom has a red kite.")
	if _, err := o.Warm(ctx, "d", WarmOptions{}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("Warm with one sequence: %v, want ErrBadOptions", err)
	}
	// the existing pack was not touched by the refusal
	again := generate(t, o, Request{Cube: "c", Prompt: prompt, NumPredict: 32})
	if again.Text != cold.Text || again.Usage.CachedTokens == 0 {
		t.Fatalf("after the refused Warm: cached %d, %q", again.Usage.CachedTokens, again.Text)
	}
}

func TestOneSequenceOptions(t *testing.T) {
	o := Options{Dir: "d", OneSequence: true, Parallel: 2, ResidentSeqs: 1, ComposeAuto: true}
	err := o.Validate()
	for _, want := range []string{"OneSequence with Parallel 2", "OneSequence with ResidentSeqs 1", "OneSequence with composition", "OneSequence without NoScheduler"} {
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, ErrBadOptions) {
			t.Errorf("Validate: %v; want ErrBadOptions saying %q", err, want)
		}
	}
	d := Options{Dir: "d", OneSequence: true, NoScheduler: true}.WithDefaults()
	if d.Parallel != 1 || d.ResidentSeqs != 0 {
		t.Fatalf("defaults with OneSequence: Parallel %d, ResidentSeqs %d; want 1, 0", d.Parallel, d.ResidentSeqs)
	}
	if err := (Options{Dir: "d", OneSequence: true, NoScheduler: true, ResidentSeqs: -1, Parallel: 1}).Validate(); err != nil {
		t.Fatal(err)
	}
}
