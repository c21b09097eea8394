package memosrt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// slot is one request sequence and what it holds between requests.
type slot struct {
	seq int
	// scope is the cube of the request that filled toks ("" for plain
	// inference): a slot's state is reused only within its scope, so that
	// cached token counts and timing never tell one cube about another's
	// prompts.
	scope string
	// toks are the tokens the sequence holds, positions [0, len(toks)).
	// Set through slotPool.hold (under slotPool.mu) by the request that
	// holds the slot, read by acquire when idle.
	toks []int32
	// held is len(toks) as admissions count it (guarded by slotPool.mu).
	held int
	// convPack is the id of the conversation pack saved from toks, "" if none.
	convPack string
	used     time.Time
	// reserved is the KV cells the request holding the slot may fill
	// (prompt plus generation budget), 0 while idle. Guarded by
	// slotPool.mu.
	reserved int
}

// slotPool lends slots to requests through a bounded queue. Safe for
// concurrent use.
type slotPool struct {
	sem      chan struct{} // one token per slot
	maxQueue int64
	waiting  atomic.Int64

	// mu guards free, every slot's reserved and an idle slot's toks, and
	// wake.
	mu   sync.Mutex
	free []*slot
	all  []*slot
	wake chan struct{} // closed (and replaced) when reserved cells are given back or admitQ moves
	// admitQ are the slots in admit, in arrival order; only the first may
	// take cells (guarded by mu)
	admitQ []*slot
	// closing is closed by drain: requests waiting for a slot or for cells
	// get ErrClosed at once (a shutdown answers the queue, 503).
	closing   chan struct{}
	closeOnce sync.Once

	// bg cancels the background requests holding slots (guarded by mu): a
	// foreground request that finds no free slot preempts one.
	bg map[*slot]context.CancelCauseFunc
}

// errPreempted ends a background request whose slot a foreground request
// took; errNoIdleSlot refuses one when no slot is idle. Either way the
// background work runs again later.
var (
	errPreempted  = errors.New("memosrt: background request preempted by a foreground request")
	errNoIdleSlot = errors.New("memosrt: no idle slot for background work")
)

// acquireBackground lends a slot to background work only when one is idle
// and no request waits: errNoIdleSlot otherwise. cancel ends the
// background request when a foreground request needs its slot (with cause
// errPreempted).
func (p *slotPool) acquireBackground(prompt []int32, scope string, cancel context.CancelCauseFunc) (*slot, int, error) {
	if p.waiting.Load() > 0 {
		return nil, 0, errNoIdleSlot
	}
	select {
	case p.sem <- struct{}{}:
	default:
		return nil, 0, errNoIdleSlot
	}
	s, n := p.take(prompt, scope)
	p.mu.Lock()
	if p.bg == nil {
		p.bg = map[*slot]context.CancelCauseFunc{}
	}
	p.bg[s] = cancel
	p.mu.Unlock()
	return s, n, nil
}

// preempt cancels one background request holding a slot, if any.
func (p *slotPool) preempt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s, cancel := range p.bg {
		cancel(errPreempted)
		delete(p.bg, s)
		return
	}
}

func newSlotPool(seqs []int, maxQueue int) *slotPool {
	p := &slotPool{sem: make(chan struct{}, len(seqs)), maxQueue: int64(maxQueue), wake: make(chan struct{}), closing: make(chan struct{})}
	for _, s := range seqs {
		sl := &slot{seq: s}
		p.free = append(p.free, sl)
		p.all = append(p.all, sl)
	}
	return p
}

// pseudo adds a slot that is never lent to requests, only reserves cells
// (a tier job's sequence, reserveNow).
func (p *slotPool) pseudo() *slot {
	p.mu.Lock()
	defer p.mu.Unlock()
	sl := &slot{seq: -1}
	p.all = append(p.all, sl)
	return sl
}

// acquire waits for a free slot; with none free and maxQueue requests
// already waiting it returns ErrBusy at once. It picks the free slot of
// scope whose held tokens share the longest prefix with prompt (ties, and
// no match in scope: least recently used) and returns that prefix length
// (0 for a slot of another scope).
func (p *slotPool) acquire(ctx context.Context, prompt []int32, scope string) (*slot, int, error) {
	select {
	case p.sem <- struct{}{}:
	default:
		if p.waiting.Add(1) > p.maxQueue {
			p.waiting.Add(-1)
			return nil, 0, ErrBusy
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
			return nil, 0, ErrClosed
		}
	}
	s, n := p.take(prompt, scope)
	return s, n, nil
}

// take removes the free slot that best continues prompt in scope (the
// longest common prefix, then the least recently used); the caller holds a
// sem token.
func (p *slotPool) take(prompt []int32, scope string) (*slot, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	best, bestN := 0, -1
	for i, s := range p.free {
		n := 0
		if s.scope == scope {
			n = commonPrefix(s.toks, prompt)
		}
		if n > bestN || n == bestN && s.used.Before(p.free[best].used) {
			best, bestN = i, n
		}
	}
	s := p.free[best]
	p.free = append(p.free[:best], p.free[best+1:]...)
	return s, bestN
}

// hold records that s's sequence now holds toks (positions [0, len)).
func (p *slotPool) hold(s *slot, toks []int32) {
	p.mu.Lock()
	s.toks, s.held = toks, len(toks)
	p.mu.Unlock()
}

// release returns s to the pool; its reservation ends (it holds
// len(s.toks) cells from now on).
func (p *slotPool) release(s *slot) {
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

// forget drops what idle slots of scope hold (their cube was deleted),
// emptying their sequences with clear.
func (p *slotPool) forget(scope string, clear func(seq int)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.free {
		if s.scope == scope || strings.HasPrefix(s.scope, scope+"\x00") {
			clear(s.seq)
			s.toks, s.held, s.convPack = nil, 0, ""
		}
	}
}

// fixedCells are KV cells held outside the slots: resident packs. They
// are a cache: a request that cannot fit otherwise evicts them.
type fixedCells interface {
	// cells returns the cells held now.
	cells() int
	// evict frees at least n cells if it can (least recently used first)
	// and returns the cells freed. It is called with slotPool.mu held.
	evict(n int) int
}

// admit reserves KV cells for the request holding sl, in arrival order
// (admitQ): at most want cells (prompt plus generation budget) and at
// least least. The unified KV cache
// of nctx cells holds the fixed cells (resident packs), the reservations
// of busy slots and tier jobs, and the tokens idle slots keep. Idle slots
// are emptied, least recently used first, until want fits, and the request
// takes what is free; resident packs are evicted only when least would not
// fit otherwise. With less than least free it waits for reservations to end
// (or ctx); a request that could not fit even in an empty KV cache is
// ErrNoRoom. It returns the cells reserved. clear empties a sequence; it
// and fixed.evict are called with p.mu held (lock order: slotPool.mu, then
// the resident level's, then the engine's).
func (p *slotPool) admit(ctx context.Context, sl *slot, least, want, nctx int, fixed fixedCells, clear func(seq int)) (int, error) {
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
			return 0, ErrClosed
		}
	}
}

// reserve is one admission try for sl (see admit), with p.mu held: idle
// slots are emptied until want fits, resident packs evicted only when
// least would not fit, and sl reserves min(want, free) when at least
// least cells are free.
func (p *slotPool) reserve(sl *slot, least, want, nctx int, fixed fixedCells, clear func(seq int)) (int, bool) {
	// a busy slot holds its reservation, or more until its request has
	// trimmed what the sequence kept from before
	used := 0
	for _, s := range p.all {
		if s != sl {
			used += max(s.reserved, s.held)
		}
	}
	free := func() int { return nctx - fixed.cells() - used }
	for free() < want {
		// the least recently used idle slot that holds something
		var lru *slot
		for _, s := range p.free {
			if s.held > 0 && (lru == nil || s.used.Before(lru.used)) {
				lru = s
			}
		}
		if lru == nil {
			break
		}
		clear(lru.seq)
		used -= lru.held
		lru.toks, lru.held, lru.convPack = nil, 0, ""
	}
	if f := free(); f < least {
		fixed.evict(least - f)
	}
	// still short: the cells kept by slots whose requests wait behind sl
	// (their previous turn) would never come back, as those requests
	// cannot go before sl; empty them (their requests then prefill, see
	// cachedAfterAdmit). Before, a tier job first in line waited for them
	// until their clients gave up (found by make soak after a restart).
	for i := len(p.admitQ) - 1; i > 0 && free() < least; i-- {
		if s := p.admitQ[i]; s != sl && s.held > 0 && s.reserved == 0 {
			clear(s.seq)
			used -= s.held
			s.toks, s.held, s.convPack = nil, 0, ""
		}
	}
	if f := free(); f >= least {
		sl.reserved = min(want, f)
		return sl.reserved, true
	}
	return 0, false
}

// cachedAfterAdmit returns how many of the n prompt tokens sl still holds
// after its admission: n, or 0 when a request first in line emptied sl
// while it waited (reserve).
func (p *slotPool) cachedAfterAdmit(sl *slot, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return min(n, sl.held)
}

// drain fails every request waiting in acquire or admit, now and later,
// with ErrClosed; requests holding a slot go on. Idempotent.
func (p *slotPool) drain() { p.closeOnce.Do(func() { close(p.closing) }) }

// reserveNow reserves n cells for sl (a tier job's pseudo-slot) without
// waiting: idle slots are emptied as admit does; with less room it returns
// ErrNoRoom. release gives the cells back.
func (p *slotPool) reserveNow(sl *slot, n, nctx int, fixed fixedCells, clear func(seq int)) (release func(), err error) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // admit returns instead of waiting
	if _, err := p.admit(ctx, sl, n, n, nctx, fixed, clear); err != nil {
		if errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w: %d cells for a tier job are not free now", ErrNoRoom, n)
		}
		return nil, err
	}
	return func() { p.unreserve(sl) }, nil
}

// unreserve ends sl's reservation and wakes admissions waiting for cells.
func (p *slotPool) unreserve(sl *slot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sl.reserved > 0 {
		sl.reserved = 0
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// heldCells returns the cells slots hold or have reserved.
func (p *slotPool) heldCells() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.all {
		n += max(s.reserved, s.held)
	}
	return n
}

func (p *slotPool) size() int   { return cap(p.sem) }
func (p *slotPool) busy() int   { return len(p.sem) }
func (p *slotPool) queued() int { return int(p.waiting.Load()) }

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
