package server

import (
	"context"
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
	// Set by the request that holds the slot, read by acquire when idle.
	toks []int32
	// convPack is the id of the conversation pack saved from toks, "" if none.
	convPack string
	used     time.Time
}

// slotPool lends slots to requests through a bounded queue. Safe for
// concurrent use.
type slotPool struct {
	sem      chan struct{} // one token per slot
	maxQueue int64
	waiting  atomic.Int64

	// mu guards free.
	mu   sync.Mutex
	free []*slot
}

func newSlotPool(seqs []int, maxQueue int) *slotPool {
	p := &slotPool{sem: make(chan struct{}, len(seqs)), maxQueue: int64(maxQueue)}
	for _, s := range seqs {
		p.free = append(p.free, &slot{seq: s})
	}
	return p
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
		select {
		case p.sem <- struct{}{}:
			p.waiting.Add(-1)
		case <-ctx.Done():
			p.waiting.Add(-1)
			return nil, 0, ctx.Err()
		}
	}
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
	return s, bestN, nil
}

// release returns s to the pool.
func (p *slotPool) release(s *slot) {
	s.used = time.Now()
	p.mu.Lock()
	p.free = append(p.free, s)
	p.mu.Unlock()
	<-p.sem
}

// forget drops what idle slots of scope hold (their cube was deleted).
func (p *slotPool) forget(scope string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.free {
		if s.scope == scope || strings.HasPrefix(s.scope, scope+"\x00") {
			s.toks, s.convPack = nil, ""
		}
	}
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
