package runtime_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
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
	eng, a := engineWithAdapter(t, 512)
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

// A foreground request with a LoRA adapter arriving while a background
// prefill (a pack warm) is active and held back by another foreground
// caller in flight: the background job is parked so the adapter switch can
// happen, the request completes, and then the background job completes
// too. Before, each waited for the other for good while the batch loop
// spun.
func TestAdapterSwitchPastBackgroundWork(t *testing.T) {
	ctx := context.Background()
	eng, a := engineWithAdapter(t, 1024)
	var long []runtime.Token
	for len(long) < 600 {
		t, _ := eng.Tokenize(" Once upon a time, there was a little girl named Lily who loved her dog Max.", len(long) == 0)
		long = append(long, t...)
	}
	short, _ := eng.Tokenize("Once upon a time", true)
	cold, err := eng.Generate(ctx, runtime.Request{Seq: 1, Tokens: short, MaxTokens: 8, Adapters: []runtime.AdapterRef{{Adapter: a, Scale: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	eng.ClearSeq(1)

	end := eng.BeginForeground() // a caller in flight (restoring, say): background work is held back
	bg := make(chan error, 1)
	go func() { bg <- eng.PrefillRequest(ctx, 0, long, nil, true) }()
	waitActive := time.Now()
	for a, _ := eng.Queue(); a == 0; a, _ = eng.Queue() {
		if time.Since(waitActive) > 2*time.Minute {
			t.Fatal("the background prefill never became active")
		}
		time.Sleep(time.Millisecond)
	}
	fg := make(chan error, 1)
	var got runtime.Result
	go func() {
		var err error
		got, err = eng.Generate(ctx, runtime.Request{Seq: 1, Tokens: short, MaxTokens: 8, Adapters: []runtime.AdapterRef{{Adapter: a, Scale: 1}}})
		fg <- err
	}()
	select {
	case err := <-fg:
		if err != nil || got.Text != cold.Text {
			t.Fatalf("LoRA request: %v, %q, want %q", err, got.Text, cold.Text)
		}
	case <-time.After(2 * time.Minute): // a deadlock, not a slow machine
		t.Fatal("the LoRA request waited for the held-back background prefill")
	}
	end()
	select {
	case err := <-bg:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the parked background prefill never finished")
	}
	if n := eng.SeqLen(0); n != len(long) {
		t.Fatalf("background prefill left %d positions, want %d", n, len(long))
	}
}

// engineWithAdapter loads stories260K (n_ctx nctx, 2 sequences, 1 thread,
// LoRA on) and a random adapter for it; both are closed at the test's end.
func engineWithAdapter(t *testing.T, nctx int) (*runtime.Engine, *llama.Adapter) {
	t.Helper()
	return engineWithAdapterSeqs(t, nctx, 2)
}

// engineWithAdapterSeqs is engineWithAdapter with nseq sequences.
func engineWithAdapterSeqs(t *testing.T, nctx, nseq int) (*runtime.Engine, *llama.Adapter) {
	t.Helper()
	ctx := context.Background()
	p := testmodels.Stories(t)
	eng, err := runtime.Load(ctx, runtime.Options{ModelPath: p, NCtx: nctx, NSeqMax: nseq, Threads: 1, LoRA: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	file := filepath.Join(t.TempDir(), "a.gguf")
	if err := lora.WriteRandom(ctx, file, p, lora.RandomSpec{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	a, err := llama.LoadAdapter(eng.Model(), file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return eng, a
}

// A request needing another adapter set is not starved by a steady stream
// of requests on the current one: once it waits, later requests queue
// behind it, the running ones drain and it is switched in (FIFO), while
// the stream goes on. Before, jobs of the current set kept being admitted
// and the switch waited until the stream stopped (found by make soak).
func TestAdapterSwitchNotStarved(t *testing.T) {
	ctx := context.Background()
	eng, a := engineWithAdapterSeqs(t, 2048, 8)
	short, _ := eng.Tokenize("Once upon a time", true)
	lora := []runtime.AdapterRef{{Adapter: a, Scale: 1}}
	cold, err := eng.Generate(ctx, runtime.Request{Seq: 7, Tokens: short, MaxTokens: 8, Adapters: lora})
	if err != nil {
		t.Fatal(err)
	}
	eng.ClearSeq(7)
	stop := make(chan struct{})
	var served atomic.Int64
	var wg sync.WaitGroup
	for seq := range 7 { // the stream: seven sequences, no adapter, back to back
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				eng.ClearSeq(seq)
				// lengths differ so they rarely end in the same step
				if _, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: short, MaxTokens: 5 + 3*seq}); err != nil {
					t.Error(err)
					return
				}
				served.Add(1)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for served.Load() < 14 { // the stream runs
		time.Sleep(time.Millisecond)
	}
	done := make(chan error, 1)
	var got runtime.Result
	before := served.Load()
	go func() {
		var err error
		got, err = eng.Generate(ctx, runtime.Request{Seq: 7, Tokens: short, MaxTokens: 8, Adapters: lora})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil || got.Text != cold.Text {
			t.Fatalf("LoRA request: %v, %q, want %q", err, got.Text, cold.Text)
		}
		// each stream had at most one request ahead of it (and one being
		// sent as it was queued); before, thousands went first
		if n := served.Load() - before; n > 14 {
			t.Fatalf("%d requests of the stream were served while the LoRA request waited, want at most 14", n)
		}
	case <-time.After(2 * time.Minute): // starved, not slow: it needs a few steps
		t.Fatalf("the LoRA request waited behind %d requests of the stream for 2 minutes", served.Load())
	}
}
