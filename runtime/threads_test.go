package runtime

import (
	"testing"
	"time"
)

// drive runs the tuner for steps decode steps of n tokens, each taking
// cost(threads) per token, and returns the thread counts it used.
func drive(t *threadTuner, steps, n int, cost func(threads int) time.Duration) []int {
	var used []int
	for range steps {
		th := t.next(n)
		used = append(used, th)
		t.done(cost(th))
	}
	return used
}

func count(xs []int, v int) int {
	c := 0
	for _, x := range xs {
		if x == v {
			c++
		}
	}
	return c
}

func TestThreadTuner(t *testing.T) {
	quiet := func(th int) time.Duration { return time.Duration(800/th) * time.Microsecond } // 2 threads faster
	busy := func(th int) time.Duration { return time.Duration(300*th) * time.Microsecond }  // 1 thread faster
	tu := newThreadTuner(2)
	// quiet: the first probe of 1 thread comes after tuneEvery steps and
	// loses; each loss doubles the wait
	used := drive(tu, tuneEvery+tuneProbe, 1, quiet)
	if tu.cur != 2 || count(used, 1) != tuneProbe || tu.every != 2*tuneEvery {
		t.Fatalf("quiet: cur %d, %d one-thread steps, every %d", tu.cur, count(used, 1), tu.every)
	}
	used = drive(tu, 20000, 1, quiet)
	if tu.cur != 2 || tu.every != tuneMax || count(used, 1) > 20000/tuneMax*tuneProbe+5*tuneProbe {
		t.Fatalf("quiet, settled: cur %d, every %d, %d one-thread steps of 20000", tu.cur, tu.every, count(used, 1))
	}
	// busy: the next probe wins and it stays at 1 thread
	used = drive(tu, tuneMax+tuneProbe, 1, busy)
	if tu.cur != 1 {
		t.Fatalf("busy: cur %d", tu.cur)
	}
	used = drive(tu, 5000, 1, busy)
	if tu.cur != 1 || count(used, 2) > 5*tuneProbe {
		t.Fatalf("busy, settled: cur %d, %d two-thread steps of 5000", tu.cur, count(used, 2))
	}
	// quiet again: back to 2 within one wait
	drive(tu, tuneMax+tuneProbe, 1, quiet)
	if tu.cur != 2 {
		t.Fatalf("quiet again: cur %d", tu.cur)
	}
	// a probe is never judged against steps of another batch size
	tu = newThreadTuner(2)
	drive(tu, tuneEvery, 1, quiet)
	if got := tu.next(4); got != 2 || tu.probing {
		t.Fatalf("batch size changed: next %d, probing %v (want 2, no probe)", got, tu.probing)
	}
	// one thread configured: nothing to tune
	if got := newThreadTuner(1).next(1); got != 0 {
		t.Fatalf("max 1: next %d", got)
	}
	var none *threadTuner
	if none.next(1) != 0 {
		t.Fatal("nil tuner tunes")
	}
	none.done(time.Millisecond)
}
