package gate

import (
	"context"
	"errors"
	"testing"
	"time"
)

var errClosed = errors.New("closed")

func TestCloseWaitsThenCancels(t *testing.T) {
	g := New(errClosed)
	started := make(chan struct{})
	var got error
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = Do(g, context.Background(), func(ctx context.Context) error {
			close(started)
			<-ctx.Done() // a call that only ends when cancelled
			return ctx.Err()
		})
	}()
	<-started
	if !g.Close() || g.Close() {
		t.Fatal("Close: want true once, then false")
	}
	if err := g.Enter(); !errors.Is(err, errClosed) {
		t.Fatalf("Enter after Close: %v, want errClosed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the deadline has passed: Wait cancels the running call
	after := 0
	g.Wait(ctx, func() { after++ })
	<-done
	if !errors.Is(got, context.Canceled) || after != 1 || g.Base().Err() == nil {
		t.Fatalf("call ended with %v, after ran %d times, base %v", got, after, g.Base().Err())
	}
}

func TestWaitForCalls(t *testing.T) {
	g := New(errClosed)
	release := make(chan struct{})
	g.Go(func() { <-release })
	g.Close()
	waited := make(chan struct{})
	go func() { g.Wait(context.Background(), nil); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned while a call was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-waited
	if g.Base().Err() != nil {
		t.Fatal("Wait cancelled base without a deadline")
	}
	ran := false
	g.Go(func() { ran = true })
	if ran {
		t.Fatal("Go ran after Close")
	}
}
