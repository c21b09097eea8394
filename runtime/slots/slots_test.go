package slots

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"testing"
)

func TestSlotPool(t *testing.T) {
	ctx := context.Background()
	p := newTestPool([]int{3, 5}, 1)
	a, n, err := p.Acquire(ctx, []int32{1, 2, 3}, "")
	if err != nil || n != 0 || a.Seq != 3 {
		t.Fatalf("first: seq %d n %d %v", a.Seq, n, err)
	}
	a.toks = []int32{1, 2, 3, 4}
	b, _, _ := p.Acquire(ctx, nil, "")
	if b.Seq != 5 {
		t.Fatalf("second: seq %d", b.Seq)
	}
	b.toks = []int32{1, 9}
	p.Release(a)
	p.Release(b)
	if p.Busy() != 0 {
		t.Fatalf("busy %d", p.Busy())
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
		s, n, err := p.Acquire(ctx, c.prompt, c.scope)
		if err != nil || s.Seq != c.seq || n != c.n {
			t.Fatalf("%s: seq %d n %d %v, want seq %d n %d", c.name, s.Seq, n, err, c.seq, c.n)
		}
		p.Release(s)
	}
	// full: one may wait, the next is refused at once
	x, _, _ := p.Acquire(ctx, nil, "")
	y, _, _ := p.Acquire(ctx, nil, "")
	got := make(chan *Slot)
	go func() { s, _, _ := p.Acquire(ctx, nil, ""); got <- s }()
	for p.Queued() != 1 {
		// the waiter registers itself before blocking
		select {
		case s := <-got:
			t.Fatalf("acquired %v while full", s)
		default:
			goruntime.Gosched()
		}
	}
	if _, _, err := p.Acquire(ctx, nil, ""); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("queue full: %v", err)
	}
	p.Release(x)
	if s := <-got; s != x {
		t.Fatalf("waiter got seq %d", s.Seq)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _, err := p.Acquire(cctx, nil, "")
		got <- &Slot{Seq: -1, toks: nil, ConvPack: errString(err)}
	}()
	for p.Queued() != 1 {
		goruntime.Gosched()
	}
	cancel()
	if s := <-got; s.ConvPack != context.Canceled.Error() || p.Queued() != 0 {
		t.Fatalf("cancelled waiter: %q, queued %d", s.ConvPack, p.Queued())
	}
	p.Release(y)
	p.Release(x)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// noFixed is a KV cache without resident packs.
type noFixed struct{}

func (noFixed) Cells() int      { return 0 }
func (noFixed) Evict(n int) int { return 0 }

// Admission is first come, first served: a request waiting for cells is
// not passed by a later one that would fit now; once the cells come back
// the first is admitted, then the second.
func TestAdmitInOrder(t *testing.T) {
	ctx := context.Background()
	p := newTestPool([]int{0, 1, 2}, 4)
	clear := func(int) {}
	holder, _, _ := p.Acquire(ctx, nil, "")
	if got, err := p.Admit(ctx, holder, 60, 60, 100, noFixed{}, clear); err != nil || got != 60 {
		t.Fatalf("holder: %d %v", got, err)
	}
	big, _, _ := p.Acquire(ctx, nil, "")
	small, _, _ := p.Acquire(ctx, nil, "")
	order := make(chan string, 2)
	go func() {
		if _, err := p.Admit(ctx, big, 50, 50, 100, noFixed{}, clear); err == nil {
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
		if _, err := p.Admit(ctx, small, 10, 10, 100, noFixed{}, clear); err == nil {
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
	p.Release(holder) // 60 cells back
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
	p := newTestPool([]int{0, 1}, 4)
	job := p.Pseudo() // a tier job: no cells of its own
	var mu sync.Mutex
	var cleared []int
	clear := func(seq int) { mu.Lock(); cleared = append(cleared, seq); mu.Unlock() }
	holder, _, _ := p.Acquire(ctx, nil, "")
	if got, err := p.Admit(ctx, holder, 40, 40, 100, noFixed{}, clear); err != nil || got != 40 {
		t.Fatalf("holder: %d %v", got, err)
	}
	waiter, _, _ := p.Acquire(ctx, nil, "")
	p.Hold(waiter, make([]int32, 30)) // its previous turn: 30 cells
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
		_, err := p.Admit(ctx, job, 50, 50, 100, noFixed{}, clear)
		jobDone <- err
	}()
	inLine(1)
	waiterDone := make(chan int, 1)
	go func() {
		if _, err := p.Admit(ctx, waiter, 20, 20, 100, noFixed{}, clear); err != nil {
			waiterDone <- -1
			return
		}
		waiterDone <- p.CachedAfterAdmit(waiter, 30)
	}()
	if err := <-jobDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(cleared) != 1 || cleared[0] != waiter.Seq {
		t.Fatalf("sequences emptied %v, want the waiter's %d", cleared, waiter.Seq)
	}
	mu.Unlock()
	p.Unreserve(job)
	if n := <-waiterDone; n != 0 {
		t.Fatalf("the waiter still counts %d cached tokens after its slot was emptied", n)
	}
}

var errTestClosed = errors.New("test: closed")

func newTestPool(seqs []int, maxQueue int) *Pool { return New(seqs, maxQueue, errTestClosed) }

// Background work takes only an idle slot, and gives it up to the first
// foreground request that finds none free.
func TestBackgroundSlotPreempted(t *testing.T) {
	p := newTestPool([]int{0}, 4)
	var cause error
	var bg *Slot
	ctx, cancel := context.WithCancelCause(context.Background())
	bg, _, err := p.AcquireBackground(nil, "", func(err error) { cause = err; cancel(err) })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.AcquireBackground(nil, "", func(error) {}); !errors.Is(err, ErrNoIdle) {
		t.Fatalf("second background acquire: %v", err)
	}
	got := make(chan *Slot)
	go func() {
		s, _, err := p.Acquire(context.Background(), nil, "")
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	<-ctx.Done() // the foreground request preempted the background one
	if !errors.Is(cause, ErrPreempted) {
		t.Fatalf("cause %v", cause)
	}
	p.Release(bg)
	if s := <-got; s != bg {
		t.Fatalf("foreground got %v", s)
	}
}

// ForgetIf empties the idle slots whose scope matches, only those.
func TestForgetIf(t *testing.T) {
	ctx := context.Background()
	p := newTestPool([]int{3, 5}, 1)
	a, _, _ := p.Acquire(ctx, nil, "alice\x00read:shop")
	b, _, _ := p.Acquire(ctx, nil, "bob")
	a.SetScope("alice\x00read:shop")
	b.SetScope("bob")
	p.Hold(a, []int32{1, 2})
	p.Hold(b, []int32{1, 2})
	p.Release(a)
	p.Release(b)
	var cleared []int
	p.ForgetIf(func(scope string) bool { return scope == "alice\x00read:shop" }, func(seq int) { cleared = append(cleared, seq) })
	if len(cleared) != 1 || cleared[0] != a.Seq || len(a.Toks()) != 0 || len(b.Toks()) != 2 {
		t.Fatalf("cleared %v; slot a holds %d, b %d", cleared, len(a.Toks()), len(b.Toks()))
	}
}
