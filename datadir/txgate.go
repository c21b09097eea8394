package datadir

import (
	"sync"
	"time"
)

// txGate counts the transactions View and Write run and lets GC make a
// moment when none runs. Badger deletes a value-log file that a GC pass
// has rewritten only when no iterator is open (value.go: rewrite puts the
// file on filesToBeDeleted while iteratorCount is not 0, and
// decrIteratorCount deletes them when it reaches 0). Under steady traffic
// the requests' iterators overlap, and the rewritten files stayed on disk
// for up to a minute: `make soak-mix` at 12 requests a second put 645 MiB
// beside 256 MiB of packs before a moment without iterators deleted them
// (docs/benchmarks.md). Every iterator memosrt opens lives inside the fn
// of View or Write, so when no transaction runs, none is open.
type txGate struct {
	mu       sync.Mutex
	inflight int           // transactions running; guarded by mu
	draining bool          // new transactions wait for resume; guarded by mu
	resume   chan struct{} // closed when draining ends; guarded by mu
	idle     chan struct{} // closed when inflight reaches 0 while draining; guarded by mu
	closed   bool          // Close began: enter refuses; guarded by mu
	zero     *sync.Cond    // signalled when inflight reaches 0; on mu, made by shut
}

// enter counts a transaction in, first waiting while a drain runs (at
// most drainWait). After shut it counts nothing and returns ErrClosed:
// Badger panics when a transaction opens an iterator on a database closed
// under it (iterator.go), so no transaction starts once Close has begun.
func (g *txGate) enter() error {
	g.mu.Lock()
	for g.draining && !g.closed {
		ch := g.resume
		g.mu.Unlock()
		<-ch
		g.mu.Lock()
	}
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.inflight++
	g.mu.Unlock()
	return nil
}

// shut refuses new transactions and waits until the running ones end.
// A transaction that never ends (one calling Close inside its fn) would
// make it wait for ever: none does.
func (g *txGate) shut() {
	g.mu.Lock()
	g.closed = true
	if g.zero == nil {
		g.zero = sync.NewCond(&g.mu)
	}
	for g.inflight > 0 {
		g.zero.Wait()
	}
	g.mu.Unlock()
}

// leave counts a transaction out.
func (g *txGate) leave() {
	g.mu.Lock()
	g.inflight--
	if g.inflight == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
	if g.inflight == 0 && g.zero != nil {
		g.zero.Broadcast()
	}
	g.mu.Unlock()
}

// drainWait is the longest drain holds new transactions back: about a
// long request's transaction. A transaction run inside another one's fn
// (on the same goroutine) waits this long, then both go on.
const drainWait = 100 * time.Millisecond

// drain holds new transactions back until none runs, for at most
// drainWait, and reports whether that moment came (then Badger has
// deleted the value-log files GC rewrote: the last iterator's Close did).
func (g *txGate) drain() bool {
	g.mu.Lock()
	if g.inflight == 0 {
		g.mu.Unlock()
		return true
	}
	idle := make(chan struct{})
	g.draining, g.resume, g.idle = true, make(chan struct{}), idle
	g.mu.Unlock()
	t := time.NewTimer(drainWait)
	ok := false
	select {
	case <-idle:
		ok = true
	case <-t.C:
	}
	t.Stop()
	g.mu.Lock()
	g.draining = false
	close(g.resume)
	g.idle = nil
	g.mu.Unlock()
	return ok
}
