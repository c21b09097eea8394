package kvcache

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testmodels"
	"github.com/memosrt/memosrt/runtime"
)

// A tier job's chunked background prefill (prefillChunks, Compute's) on a pool
// sequence that a user request has just released, and a user request on
// one the job has just released, while the other sequence runs a user
// request too: every hand-over happens as soon as Generate returns, and no
// request meets ErrSeqBusy. Each job's sequence then holds the whole pack.
func TestPrefillBackgroundOnReleasedSeq(t *testing.T) {
	ctx := context.Background()
	eng, err := runtime.Load(ctx, runtime.Options{ModelPath: testmodels.Stories(t), NCtx: 1024, NSeqMax: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var pack []int32
	for len(pack) < 80 {
		toks, _ := eng.Tokenize(" Once upon a time, there was a little girl named Lily who loved her dog Max.", len(pack) == 0)
		pack = append(pack, toks...)
	}
	stop := make(chan struct{})
	var users sync.WaitGroup
	userErrs := make(chan error, 2)
	for u := range 2 {
		users.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				seq, err := eng.AcquireSeq(ctx)
				if err != nil {
					userErrs <- err
					return
				}
				// half of them background, so the job's chunks are not
				// always held back behind foreground requests
				_, err = eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: pack[:10+n%10], MaxTokens: 1 + n%2, Background: n%2 == 1})
				eng.ReleaseSeq(seq)
				if err != nil {
					userErrs <- fmt.Errorf("user %d, request %d on seq %d: %w", u, n, seq, err)
					return
				}
			}
		})
	}
	defer func() {
		close(stop)
		users.Wait()
		close(userErrs)
		for err := range userErrs {
			t.Error(err)
		}
	}()
	for i := range 50 {
		seq, err := eng.AcquireSeq(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = prefillChunks(ctx, eng, seq, pack, 0, WarmOptions{Background: true, Chunk: 16})
		n := eng.SeqLen(seq)
		eng.ClearSeq(seq)
		eng.ReleaseSeq(seq)
		if err != nil {
			t.Fatalf("job %d on seq %d: %v", i, seq, err)
		}
		if n != len(pack) {
			t.Fatalf("job %d: seq %d holds %d positions, want %d", i, seq, n, len(pack))
		}
	}
}
