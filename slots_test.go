package memosrt

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"testing"
)

func TestSlotPool(t *testing.T) {
	ctx := context.Background()
	p := newSlotPool([]int{3, 5}, 1)
	a, n, err := p.acquire(ctx, []int32{1, 2, 3}, "")
	if err != nil || n != 0 || a.seq != 3 {
		t.Fatalf("first: seq %d n %d %v", a.seq, n, err)
	}
	a.toks = []int32{1, 2, 3, 4}
	b, _, _ := p.acquire(ctx, nil, "")
	if b.seq != 5 {
		t.Fatalf("second: seq %d", b.seq)
	}
	b.toks = []int32{1, 9}
	p.release(a)
	p.release(b)
	if p.busy() != 0 {
		t.Fatalf("busy %d", p.busy())
	}
	cases := []struct {
		name   string
		prompt []int32
		scope  string
		seq, n int
	}{
		{"longest prefix", []int32{1, 2, 3, 7}, "", 3, 3},
		{"other prefix", []int32{1, 9, 9}, "", 5, 2},
		{"tie: least recently used", []int32{8}, "", 3, 0},
		{"other scope: no reuse", []int32{1, 2, 3, 7}, "alice", 5, 0},
	}
	for _, c := range cases {
		s, n, err := p.acquire(ctx, c.prompt, c.scope)
		if err != nil || s.seq != c.seq || n != c.n {
			t.Fatalf("%s: seq %d n %d %v, want seq %d n %d", c.name, s.seq, n, err, c.seq, c.n)
		}
		p.release(s)
	}
	// full: one may wait, the next is refused at once
	x, _, _ := p.acquire(ctx, nil, "")
	y, _, _ := p.acquire(ctx, nil, "")
	got := make(chan *slot)
	go func() { s, _, _ := p.acquire(ctx, nil, ""); got <- s }()
	for p.queued() != 1 {
		// the waiter registers itself before blocking
		select {
		case s := <-got:
			t.Fatalf("acquired %v while full", s)
		default:
			goruntime.Gosched()
		}
	}
	if _, _, err := p.acquire(ctx, nil, ""); !errors.Is(err, ErrBusy) {
		t.Fatalf("queue full: %v", err)
	}
	p.release(x)
	if s := <-got; s != x {
		t.Fatalf("waiter got seq %d", s.seq)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _, err := p.acquire(cctx, nil, "")
		got <- &slot{seq: -1, toks: nil, convPack: errString(err)}
	}()
	for p.queued() != 1 {
		goruntime.Gosched()
	}
	cancel()
	if s := <-got; s.convPack != context.Canceled.Error() || p.queued() != 0 {
		t.Fatalf("cancelled waiter: %q, queued %d", s.convPack, p.queued())
	}
	p.release(y)
	p.release(x)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// noFixed is a KV cache without resident packs.
type noFixed struct{}

func (noFixed) cells() int      { return 0 }
func (noFixed) evict(n int) int { return 0 }

// Admission is first come, first served: a request waiting for cells is
// not passed by a later one that would fit now; once the cells come back
// the first is admitted, then the second.
func TestAdmitInOrder(t *testing.T) {
	ctx := context.Background()
	p := newSlotPool([]int{0, 1, 2}, 4)
	clear := func(int) {}
	holder, _, _ := p.acquire(ctx, nil, "")
	if got, err := p.admit(ctx, holder, 60, 60, 100, noFixed{}, clear); err != nil || got != 60 {
		t.Fatalf("holder: %d %v", got, err)
	}
	big, _, _ := p.acquire(ctx, nil, "")
	small, _, _ := p.acquire(ctx, nil, "")
	order := make(chan string, 2)
	go func() {
		if _, err := p.admit(ctx, big, 50, 50, 100, noFixed{}, clear); err == nil {
			order <- "big"
		}
	}()
	for {
		p.mu.Lock()
		n := len(p.admitQ)
		p.mu.Unlock()
		if n == 1 {
			break
		}
		goruntime.Gosched()
	}
	go func() {
		if _, err := p.admit(ctx, small, 10, 10, 100, noFixed{}, clear); err == nil {
			order <- "small"
		}
	}()
	for {
		p.mu.Lock()
		n := len(p.admitQ)
		p.mu.Unlock()
		if n == 2 {
			break
		}
		select {
		case o := <-order:
			t.Fatalf("%s admitted while the big request waits first", o)
		default:
			goruntime.Gosched()
		}
	}
	p.release(holder) // 60 cells back
	if a, b := <-order, <-order; a != "big" || b != "small" {
		t.Fatalf("admitted %s then %s, want big then small", a, b)
	}
}

// A request first in line for cells is not left waiting for the cells
// that slots waiting behind it keep from their previous turn (they can
// only go after it): those slots are emptied for it, and their requests
// learn that their cached prefix is gone (cachedAfterAdmit 0).
func TestAdmitHeadEmptiesWaiters(t *testing.T) {
	ctx := context.Background()
	p := newSlotPool([]int{0, 1}, 4)
	job := p.pseudo() // a tier job: no cells of its own
	var mu sync.Mutex
	var cleared []int
	clear := func(seq int) { mu.Lock(); cleared = append(cleared, seq); mu.Unlock() }
	holder, _, _ := p.acquire(ctx, nil, "")
	if got, err := p.admit(ctx, holder, 40, 40, 100, noFixed{}, clear); err != nil || got != 40 {
		t.Fatalf("holder: %d %v", got, err)
	}
	waiter, _, _ := p.acquire(ctx, nil, "")
	p.hold(waiter, make([]int32, 30)) // its previous turn: 30 cells
	inLine := func(n int) {
		for {
			p.mu.Lock()
			l := len(p.admitQ)
			p.mu.Unlock()
			if l == n {
				return
			}
			goruntime.Gosched()
		}
	}
	// the job waits first in line for 50 cells: 40 busy, 30 kept, 30 free
	jobDone := make(chan error, 1)
	go func() {
		_, err := p.admit(ctx, job, 50, 50, 100, noFixed{}, clear)
		jobDone <- err
	}()
	inLine(1)
	waiterDone := make(chan int, 1)
	go func() {
		if _, err := p.admit(ctx, waiter, 20, 20, 100, noFixed{}, clear); err != nil {
			waiterDone <- -1
			return
		}
		waiterDone <- p.cachedAfterAdmit(waiter, 30)
	}()
	if err := <-jobDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(cleared) != 1 || cleared[0] != waiter.seq {
		t.Fatalf("sequences emptied %v, want the waiter's %d", cleared, waiter.seq)
	}
	mu.Unlock()
	p.unreserve(job)
	if n := <-waiterDone; n != 0 {
		t.Fatalf("the waiter still counts %d cached tokens after its slot was emptied", n)
	}
}
