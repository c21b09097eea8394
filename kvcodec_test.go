package memosrt

import (
	"context"
	"testing"
	"time"
)

// serve --kv-codec q8: the first pack of the model is stored exact and
// starts the calibration in the background; once the gate has passed q8
// (stories260K: 100% top-1, 100% greedy), the next pack is stored q8,
// restores and answers as a cold prefill does. The decision persists: a
// reopened OS shows it at once.
func TestKVCodecGate(t *testing.T) {
	dir := t.TempDir()
	opts := testOptions(t, dir)
	opts.Parallel = 1
	opts.KVCodec = "q8"
	ctx := context.Background()
	o, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	addMemories(t, o, "a", "Lily has a dog named Max.", "Max is brown and very fast.")
	if _, err := o.Warm(ctx, "a", WarmOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := o.Tiers(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.PackCodec != "exact" || st.KVGate == nil || st.KVGate.Setting != "q8" {
		t.Fatalf("first pack %s, gate %+v", st.PackCodec, st.KVGate)
	}
	// the calibration runs in the background: wait for its decision
	deadline := time.Now().Add(5 * time.Minute)
	for !st.KVGate.Calibrated {
		if time.Now().After(deadline) {
			t.Fatal("no calibration decision after 5 minutes")
		}
		time.Sleep(50 * time.Millisecond)
		if st, err = o.Tiers(ctx, "a", 0); err != nil {
			t.Fatal(err)
		}
	}
	if g := st.KVGate; g.Codec != "q8" || g.Compose || !g.Decision.Passes("q8") {
		t.Fatalf("gate after calibration: %+v", g)
	}
	addMemories(t, o, "b", "Tom loves red apples.", "Tom does not like fish.")
	ps, err := o.Warm(ctx, "b", WarmOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err = o.Tiers(ctx, "b", 0); err != nil || st.PackCodec != "q8" {
		t.Fatalf("second pack %q: %v", st.PackCodec, err)
	}
	prompt := "Once upon a time,"
	cold := generate(t, o, Request{Cube: "b", Prompt: prompt, NoCache: true})
	generate(t, o, Request{Cube: "a", Prompt: "Tom", NumPredict: 2}) // the slot holds another state
	o.KVCache().DropRAM()
	warm := generate(t, o, Request{Cube: "b", Prompt: prompt})
	if warm.CacheSource != SourceRestored || warm.Usage.CachedTokens != ps.Packs[0].NTokens || warm.Text != cold.Text {
		t.Fatalf("q8 pack: %s, %d cached (pack %d), %q; cold %q", warm.CacheSource, warm.Usage.CachedTokens, ps.Packs[0].NTokens, warm.Text, cold.Text)
	}
	// /api/show's model_info carries the gate's view
	ms := o.Models()
	if g, ok := ms[0].Info["memosrt.kv_gate"]; !ok || g == nil {
		t.Fatalf("model_info without memosrt.kv_gate: %v", ms[0].Info)
	}
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	o2 := openOS(t, opts)
	if st, err = o2.Tiers(ctx, "b", 0); err != nil || !st.KVGate.Calibrated || st.KVGate.Codec != "q8" || st.PackCodec != "q8" {
		t.Fatalf("reopened: %+v, pack %s, %v", st.KVGate, st.PackCodec, err)
	}
}
