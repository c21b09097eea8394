package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testenv"
	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
)

// A sequence is free again as soon as Generate returns on it, whichever
// way the request ended (done, prefill chunk, cancelled, OnText error),
// while requests on other sequences keep the batch loop busy and end in
// the same steps: the next request on the sequence, issued at once, is
// never refused with ErrSeqBusy. memosrt's slot pool and the tier jobs'
// chunked background prefill (kvcache's Compute) rely on it.
// The other sequences run foreground generations in one subtest and
// chunked background prefills in the other (background work waits while
// foreground work is in flight, so the sequence's own chunks are
// background only in the second).
func TestSeqFreeWhenGenerateReturns(t *testing.T) {
	eng, err := runtime.Load(context.Background(), runtime.Options{ModelPath: testmodels.Stories(t), NCtx: 1024, NSeqMax: 4, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	toks, err := eng.Tokenize("Once upon a time, there was a little girl named Lily. She loved to play outside.", true)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	foreground := func(seq, n int) error {
		// one or two tokens: jobs end in most steps
		_, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:8+n%8], MaxTokens: 1 + n%2})
		return err
	}
	background := func(seq, n int) error {
		npast := n * seqFreeChunk % len(toks)
		_, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:min(len(toks), npast+seqFreeChunk)], NPast: npast, PrefillOnly: true, Background: true})
		return err
	}
	rounds := 100
	if testenv.Race {
		rounds = 40 // the detector slows each round several times over
	}
	t.Run("foreground", func(t *testing.T) { seqFree(t, eng, toks, foreground, false, rounds) })
	t.Run("background", func(t *testing.T) { seqFree(t, eng, toks, background, true, rounds) })
}

// seqFreeChunk is the prefill chunk in tokens (the tier jobs' JobChunk is 16).
const seqFreeChunk = 5

// seqFree runs rounds of back-to-back requests on sequence 0 while
// sequences 1 to 3 each run other(seq, n) for n = 0, 1, ... until it ends;
// bg makes sequence 0's chunked prefill background work.
func seqFree(t *testing.T, eng *runtime.Engine, toks []runtime.Token, other func(seq, n int) error, bg bool, rounds int) {
	ctx := context.Background()
	stop := make(chan struct{})
	var others sync.WaitGroup
	otherErrs := make(chan error, 3)
	for seq := 1; seq < 4; seq++ {
		others.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := other(seq, n); err != nil {
					otherErrs <- fmt.Errorf("seq %d, request %d: %w", seq, n, err)
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		others.Wait()
		close(otherErrs)
		for err := range otherErrs {
			t.Error(err)
		}
	}()

	const seq, head = 0, 6
	errUser := errors.New("enough")
	for i := range rounds {
		// a generation, then the rest of the prompt in chunks
		r, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:head], MaxTokens: 1})
		if err != nil {
			t.Fatalf("round %d: generate: %v", i, err)
		}
		if r.EvalTokens != 1 && r.DoneReason != "stop" {
			t.Fatalf("round %d: generate: %d tokens, reason %q", i, r.EvalTokens, r.DoneReason)
		}
		for npast := head; npast < len(toks); npast += seqFreeChunk {
			end := min(len(toks), npast+seqFreeChunk)
			if _, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:end], NPast: npast, PrefillOnly: true, Background: bg}); err != nil {
				t.Fatalf("round %d: prefill to %d: %v", i, end, err)
			}
		}
		if got := eng.SeqLen(seq); got != len(toks) {
			t.Fatalf("round %d: seq holds %d positions after the prefill, want %d", i, got, len(toks))
		}
		// a request cancelled after its first token
		cctx, cancel := context.WithCancel(ctx)
		_, err = eng.Generate(cctx, runtime.Request{Seq: seq, Tokens: toks, NPast: len(toks) - 1, MaxTokens: 64, OnText: func(string) error {
			cancel()
			return nil
		}})
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: cancelled generate: %v", i, err)
		}
		// one ended by its OnText callback
		_, err = eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:head], MaxTokens: 64, OnText: func(string) error { return errUser }})
		if err != nil && !errors.Is(err, errUser) {
			t.Fatalf("round %d: generate ended by OnText: %v", i, err)
		}
		// a foreground prefill
		if err := eng.Prefill(ctx, seq, toks[head:], head); err != nil {
			t.Fatalf("round %d: prefill: %v", i, err)
		}
		if got := eng.SeqLen(seq); got != len(toks) {
			t.Fatalf("round %d: seq holds %d positions after Prefill, want %d", i, got, len(toks))
		}
	}
}
