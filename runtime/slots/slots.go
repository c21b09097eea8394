package slots

import (
	"context"
	"errors"
	"fmt"
	"github.com/memosrt/memosrt/errkind"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Slot is one request sequence and what it holds between requests.
type Slot struct {
	// Seq is the engine sequence; -1 for a pseudo-slot (Pseudo).
	Seq int
	// scope is the cube of the request that filled toks ("" for plain
	// inference): a slot's state is reused only within its scope, so that
	// cached token counts and timing never tell one cube about another's
	// prompts.
	scope string
	// toks are the tokens the sequence holds, positions [0, len(toks)).
	// Set through Pool.hold (under Pool.mu) by the request that
	// holds the slot, read by Acquire when idle.
	toks []int32
	// held is len(toks) as admissions count it (guarded by Pool.mu).
	held int
	// ConvPack is the id of the conversation pack saved from toks, "" if
	// none; read and written by the request holding the slot.
	ConvPack string
	used     time.Time
	// reserved is the KV cells the request holding the slot may fill
	// (prompt plus generation budget), 0 while idle. Guarded by
	// Pool.mu.
	reserved int
}

// Pool lends slots to requests through a bounded queue. Safe for
// concurrent use.
type Pool struct {
	sem      chan struct{} // one token per slot
	maxQueue int64
	waiting  atomic.Int64

	// mu guards free, every slot's reserved and an idle slot's toks, and
	// wake.
	mu   sync.Mutex
	free []*Slot
	all  []*Slot
	wake chan struct{} // closed (and replaced) when reserved cells are given back or admitQ moves
	// admitQ are the slots in admit, in arrival order; only the first may
	// take cells (guarded by mu)
	admitQ []*Slot
	// closing is closed by Drain: requests waiting for a slot or for cells
	// get the closed error at once (a shutdown answers the queue, 503).
	closing   chan struct{}
	closeOnce sync.Once
	closed    error // what waiters get after Drain

	// bg cancels the background requests holding slots (guarded by mu): a
	// foreground request that finds no free slot preempts one.
	bg map[*Slot]context.CancelCauseFunc
}

var (
	// ErrQueueFull is returned by Acquire when every slot is taken and
	// the queue is full.
	ErrQueueFull = errkind.New(errkind.Busy, "memosrt: queue full")
	// ErrNoRoom is returned by Admit for a request that could not fit
	// even an empty KV cache, and by ReserveNow when its cells are not
	// free now.
	ErrNoRoom = errors.New("memosrt: the KV cache cannot hold this request")
	// ErrPreempted ends a background request whose slot a foreground
	// request took; ErrNoIdle refuses one when no slot is idle. Either
	// way the background work runs again later.
	ErrPreempted = errors.New("memosrt: background request preempted by a foreground request")
	ErrNoIdle    = errors.New("memosrt: no idle slot for background work")
)

// AcquireBackground lends a slot to background work only when one is idle
// and no request waits: ErrNoIdle otherwise. cancel ends the
// background request when a foreground request needs its slot (with cause
// ErrPreempted).
func (p *Pool) AcquireBackground(prompt []int32, scope string, cancel context.CancelCauseFunc) (*Slot, int, error) {
	if p.waiting.Load() > 0 {
		return nil, 0, ErrNoIdle
	}
	select {
	case p.sem <- struct{}{}:
	default:
		return nil, 0, ErrNoIdle
	}
	s, n := p.take(prompt, scope)
	p.mu.Lock()
	if p.bg == nil {
		p.bg = map[*Slot]context.CancelCauseFunc{}
	}
	p.bg[s] = cancel
	p.mu.Unlock()
	return s, n, nil
}

// preempt cancels one background request holding a slot, if any.
func (p *Pool) preempt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, cancel := range p.bg {
		cancel(ErrPreempted)
		delete(p.bg, s)
		return
	}
}

// New returns a pool lending the sequences seqs, with at most maxQueue
// requests waiting for one; after Drain, waiters get closed.
func New(seqs []int, maxQueue int, closed error) *Pool {
	p := &Pool{closed: closed, sem: make(chan struct{}, len(seqs)), maxQueue: int64(maxQueue), wake: make(chan struct{}), closing: make(chan struct{})}
	for _, s := range seqs {
		sl := &Slot{Seq: s}
		p.free = append(p.free, sl)
		p.all = append(p.all, sl)
	}
	return p
}

// Pseudo adds a slot that is never lent to requests, only reserves cells
// (a tier job's sequence, ReserveNow).
func (p *Pool) Pseudo() *Slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	sl := &Slot{Seq: -1}
	p.all = append(p.all, sl)
	return sl
}

// Acquire waits for a free slot; with none free and maxQueue requests
// already waiting it returns ErrQueueFull at once. It picks the free slot of
// scope whose held tokens share the longest prefix with prompt (ties, and
// no match in scope: least recently used) and returns that prefix length
// (0 for a slot of another scope).
func (p *Pool) Acquire(ctx context.Context, prompt []int32, scope string) (*Slot, int, error) {
	select {
	case p.sem <- struct{}{}:
	default:
		if p.waiting.Add(1) > p.maxQueue {
			p.waiting.Add(-1)
			return nil, 0, ErrQueueFull
		}
		p.preempt()
		select {
		case p.sem <- struct{}{}:
			p.waiting.Add(-1)
		case <-ctx.Done():
			p.waiting.Add(-1)
			return nil, 0, ctx.Err()
		case <-p.closing:
			p.waiting.Add(-1)
			return nil, 0, p.closed
		}
	}
	s, n := p.take(prompt, scope)
	return s, n, nil
}

// take removes the free slot that best continues prompt in scope (the
// longest common prefix, then the least recently used); the caller holds a
// sem token.
func (p *Pool) take(prompt []int32, scope string) (*Slot, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, bestN := 0, -1
	for i, s := range p.free {
		n := 0
		if s.scope == scope {
			n = CommonPrefix(s.toks, prompt)
		}
		if n > bestN || n == bestN && s.used.Before(p.free[best].used) {
			best, bestN = i, n
		}
	}
	s := p.free[best]
	p.free = append(p.free[:best], p.free[best+1:]...)
	return s, bestN
}

// Hold records that s's sequence now holds toks (positions [0, len)).
func (p *Pool) Hold(s *Slot, toks []int32) {
	p.mu.Lock()
	s.toks, s.held = toks, len(toks)
	p.mu.Unlock()
}

// Release returns s to the pool; its reservation ends (it holds
// len(s.toks) cells from now on).
func (p *Pool) Release(s *Slot) {
	s.used = time.Now()
	p.mu.Lock()
	delete(p.bg, s)
	p.free = append(p.free, s)
	if s.reserved > 0 {
		s.reserved = 0
		close(p.wake)
		p.wake = make(chan struct{})
	}
	p.mu.Unlock()
	<-p.sem
}

// Forget drops what idle slots of scope hold (their cube was deleted),
// emptying their sequences with clear.
func (p *Pool) Forget(scope string, clear func(seq int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.free {
		if s.scope == scope || strings.HasPrefix(s.scope, scope+"\x00") {
			clear(s.Seq)
			s.toks, s.held, s.ConvPack = nil, 0, ""
		}
	}
}

// ForgetIf drops what idle slots hold whose scope match reports true (a
// cube their state read besides their own was deleted), emptying their
// sequences with clear. match runs with the pool's lock held.
func (p *Pool) ForgetIf(match func(scope string) bool, clear func(seq int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.free {
		if match(s.scope) {
			clear(s.Seq)
			s.toks, s.held, s.ConvPack = nil, 0, ""
		}
	}
}

// Fixed are KV cells held outside the slots: resident packs. They
// are a cache: a request that cannot fit otherwise evicts them.
type Fixed interface {
	// Cells returns the cells held now.
	Cells() int
	// Evict frees at least n cells if it can (least recently used first)
	// and returns the cells freed. It is called with Pool.mu held.
	Evict(n int) int
}

// Admit reserves KV cells for the request holding sl, in arrival order
// (admitQ): at most want cells (prompt plus generation budget) and at
// least least. The unified KV cache
// of nctx cells holds the fixed cells (resident packs), the reservations
// of busy slots and tier jobs, and the tokens idle slots keep. Idle slots
// are emptied, least recently used first, until want fits, and the request
// takes what is free; resident packs are evicted only when least would not
// fit otherwise. With less than least free it waits for reservations to end
// (or ctx); a request that could not fit even in an empty KV cache is
// ErrNoRoom. It returns the cells reserved. clear empties a sequence; it
// and fixed.Evict are called with p.mu held (lock order: Pool.mu, then
// the resident level's, then the engine's).
func (p *Pool) Admit(ctx context.Context, sl *Slot, least, want, nctx int, fixed Fixed, clear func(seq int)) (int, error) {
	if least > nctx {
		return 0, fmt.Errorf("%w: it needs at least %d cells, n_ctx is %d", ErrNoRoom, least, nctx)
	}
	// first come, first served: a request waiting for cells is not passed
	// by later, smaller ones (they would keep it waiting for good)
	p.mu.Lock()
	p.admitQ = append(p.admitQ, sl)
	if len(p.admitQ) > 1 && sl.held > 0 {
		// the first in line may take what sl keeps (see reserve)
		close(p.wake)
		p.wake = make(chan struct{})
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		if i := slices.Index(p.admitQ, sl); i >= 0 {
			p.admitQ = slices.Delete(p.admitQ, i, i+1)
		}
		close(p.wake) // the next in line looks again
		p.wake = make(chan struct{})
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		if p.admitQ[0] == sl {
			if got, ok := p.reserve(sl, least, want, nctx, fixed, clear); ok {
				p.mu.Unlock()
				return got, nil
			}
		}
		// not first in line, or less than least free: wait for a change
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-p.closing:
			return 0, p.closed
		}
	}
}

// reserve is one admission try for sl (see admit), with p.mu held: idle
// slots are emptied until want fits, resident packs evicted only when
// least would not fit, and sl reserves min(want, free) when at least
// least cells are free.
func (p *Pool) reserve(sl *Slot, least, want, nctx int, fixed Fixed, clear func(seq int)) (int, bool) {
	// a busy slot holds its reservation, or more until its request has
	// trimmed what the sequence kept from before
	used := 0
	for _, s := range p.all {
		if s != sl {
			used += max(s.reserved, s.held)
		}
	}
	free := func() int { return nctx - fixed.Cells() - used }
	for free() < want {
		// the least recently used idle slot that holds something
		var lru *Slot
		for _, s := range p.free {
			if s.held > 0 && (lru == nil || s.used.Before(lru.used)) {
				lru = s
			}
		}
		if lru == nil {
			break
		}
		clear(lru.Seq)
		used -= lru.held
		lru.toks, lru.held, lru.ConvPack = nil, 0, ""
	}
	if f := free(); f < least {
		fixed.Evict(least - f)
	}
	// still short: the cells kept by slots whose requests wait behind sl
	// (their previous turn) would never come back, as those requests
	// cannot go before sl; empty them (their requests then prefill, see
	// CachedAfterAdmit). Before, a tier job first in line waited for them
	// until their clients gave up (found by make soak after a restart).
	for i := len(p.admitQ) - 1; i > 0 && free() < least; i-- {
		if s := p.admitQ[i]; s != sl && s.held > 0 && s.reserved == 0 {
			clear(s.Seq)
			used -= s.held
			s.toks, s.held, s.ConvPack = nil, 0, ""
		}
	}
	if f := free(); f >= least {
		sl.reserved = min(want, f)
		return sl.reserved, true
	}
	return 0, false
}

// CachedAfterAdmit returns how many of the n prompt tokens sl still holds
// after its admission: n, or 0 when a request first in line emptied sl
// while it waited (reserve).
func (p *Pool) CachedAfterAdmit(sl *Slot, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return min(n, sl.held)
}

// Drain fails every request waiting in acquire or admit, now and later,
// with the closed error given to New; requests holding a slot go on. Idempotent.
func (p *Pool) Drain() { p.closeOnce.Do(func() { close(p.closing) }) }

// ReserveNow reserves n cells for sl (a tier job's pseudo-slot) without
// waiting: idle slots are emptied as admit does; with less room it returns
// ErrNoRoom. release gives the cells back.
func (p *Pool) ReserveNow(sl *Slot, n, nctx int, fixed Fixed, clear func(seq int)) (release func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // admit returns instead of waiting
	if _, err := p.Admit(ctx, sl, n, n, nctx, fixed, clear); err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %d cells for a tier job are not free now", ErrNoRoom, n)
		}
		return nil, err
	}
	return func() { p.Unreserve(sl) }, nil
}

// Unreserve ends sl's reservation and wakes admissions waiting for cells.
func (p *Pool) Unreserve(sl *Slot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl.reserved > 0 {
		sl.reserved = 0
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// HeldCells returns the cells slots hold or have reserved.
func (p *Pool) HeldCells() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.all {
		n += max(s.reserved, s.held)
	}
	return n
}

// All returns every slot, lent or not, pseudo-slots included
// (inspection and tests).
func (p *Pool) All() []*Slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.all)
}

// Size is the slots lent to requests; Busy those lent now; Queued the
// requests waiting for one.
func (p *Pool) Size() int   { return cap(p.sem) }
func (p *Pool) Busy() int   { return len(p.sem) }
func (p *Pool) Queued() int { return int(p.waiting.Load()) }

// CommonPrefix returns the length of the longest common prefix of a and b.
func CommonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// Toks returns the tokens s's sequence holds (Hold); read by the request
// holding s.
func (s *Slot) Toks() []int32 { return s.toks }

// SetScope sets the cube whose state s's sequence holds from now on; by
// the request holding s, before Hold.
func (s *Slot) SetScope(scope string) { s.scope = scope }
