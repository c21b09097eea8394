package gate

import (
	"context"
	"sync"
)

// Gate admits calls (Enter/Leave, or Call) until Close.
type Gate struct {
	closedErr error
	mu        sync.RWMutex // guards closed and the Add side of inflight
	closed    bool
	inflight  sync.WaitGroup
	base      context.Context // cancelled by Wait once its deadline passes
	cancel    context.CancelFunc
}

// New returns an open gate whose Enter returns closedErr after Close.
func New(closedErr error) *Gate {
	g := &Gate{closedErr: closedErr}
	g.base, g.cancel = context.WithCancel(context.Background())
	return g
}

// Enter admits a call: the error given to New after Close. The caller
// calls Leave when the call ends.
func (g *Gate) Enter() error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return g.closedErr
	}
	g.inflight.Add(1)
	return nil
}

// Leave ends a call Enter admitted.
func (g *Gate) Leave() { g.inflight.Done() }

// Bound returns ctx, also cancelled when Wait gives up waiting; the
// caller calls stop when done with it.
func (g *Gate) Bound(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(g.base, cancel)
	return ctx, func() { unhook(); cancel() }
}

// Base is cancelled when Wait gives up waiting, and by Cancel: the
// context of background work.
func (g *Gate) Base() context.Context { return g.base }

// Cancel cancels Base (and every Bound context).
func (g *Gate) Cancel() { g.cancel() }

// Close stops admitting calls; false if it was closed already.
func (g *Gate) Close() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	return true
}

// Wait waits for the admitted calls to end and then for after (nil:
// nothing); when ctx ends first, it cancels Base and waits on.
func (g *Gate) Wait(ctx context.Context, after func()) {
	done := make(chan struct{})
	go func() {
		g.inflight.Wait()
		if after != nil {
			after()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		g.cancel()
		<-done
	}
}

// Go runs f on its own goroutine as an admitted call; nothing after
// Close.
func (g *Gate) Go(f func()) {
	if g.Enter() != nil {
		return
	}
	go func() {
		defer g.Leave()
		f()
	}()
}

// Call runs f as an admitted call (g's closed error after Close) with ctx
// also cancelled when Wait gives up waiting.
func Call[T any](g *Gate, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	if err := g.Enter(); err != nil {
		var zero T
		return zero, err
	}
	defer g.Leave()
	ctx, stop := g.Bound(ctx)
	defer stop()
	return f(ctx)
}

// Do is Call for f without a result.
func Do(g *Gate, ctx context.Context, f func(context.Context) error) error {
	_, err := Call(g, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}
