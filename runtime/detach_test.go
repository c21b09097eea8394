package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
)

// DetachAdapter (batcher lock, then engine lock) while requests keep
// ending (the batch loop holds the engine lock for a step): the step
// finishes its jobs after it releases the engine lock, so the two never
// wait for each other. Lock order: batcher, then engine (package doc).
func TestDetachWhileDecoding(t *testing.T) {
	ctx := context.Background()
	p := testmodels.Stories(t)
	eng, err := runtime.Load(ctx, runtime.Options{ModelPath: p, NCtx: 512, NSeqMax: 2, Threads: 1, LoRA: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	file := filepath.Join(t.TempDir(), "a.gguf")
	if err := lora.WriteRandom(ctx, file, p, lora.RandomSpec{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a, err := llama.LoadAdapter(eng.Model(), file)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	toks, _ := eng.Tokenize("Once upon a time", true)
	done := make(chan error, 1)
	go func() {
		var wg sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan error, 2)
		for seq := range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					// one token each: every step ends a job
					if _, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks, MaxTokens: 1}); err != nil && !errors.Is(err, runtime.ErrSeqBusy) {
						errs <- err
						return
					}
				}
			})
		}
		for range 3000 {
			eng.DetachAdapter(a)
		}
		close(stop)
		wg.Wait()
		close(errs)
		done <- <-errs
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Minute): // a deadlock, not a slow machine
		t.Fatal("DetachAdapter and the batch loop deadlocked")
	}
}
