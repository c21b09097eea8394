package runtime

import "time"

// Decode thread count under CPU contention.
//
// ggml's threads meet at a barrier after every graph node and wait for
// each other spinning. When other processes take the CPUs, a thread
// waiting at the barrier spins through its time slice while the thread it
// waits for is not running: measured with 3 busy processes on 2 CPUs,
// stories260K decodes at 230–350 tok/s with 2 threads and 840–1,030 with
// one (bench/contention.sh, docs/benchmarks.md). Quiet, 2 threads are faster (about
// 2,400 against 1,475). With Options.Threads unset, the engine therefore
// measures: every tuneEvery decode steps (twice as long after each probe
// that loses, up to tuneMax) it runs tuneProbe steps at the other count
// (1, or all of Options' threads) and keeps the one whose mean time per
// token is lower by more than tuneGain. Prefill keeps
// every thread (llama.cpp's n_threads_batch). An explicit Options.Threads
// is used as given.
const (
	tuneEvery = 128  // decode steps between probes, doubled after each lost probe up to tuneMax
	tuneMax   = 2048 // the longest wait between probes
	tuneProbe = 16   // decode steps of a probe (and of the baseline kept)
	tuneGain  = 0.85 // a probe wins below this fraction of the baseline
)

// threadTuner picks the decode thread count (see above). Used by the
// batch goroutine only, under Engine.mu.
type threadTuner struct {
	max     int // Options.Threads
	cur     int // decode threads now
	steps   int // decode steps since the last probe
	every   int // decode steps between probes now (tuneEvery..tuneMax)
	base    []time.Duration
	probe   []time.Duration
	probing bool
	other   int // the count being probed
	n       int // tokens per step of base and probe: other sizes start over
}

func newThreadTuner(max int) *threadTuner { return &threadTuner{max: max, cur: max, every: tuneEvery} }

// next returns the thread count for a decode step of n tokens (one per
// sequence); 0 for a tuner that does not tune.
func (t *threadTuner) next(n int) int {
	if t == nil || t.max < 2 {
		return 0
	}
	if n != t.n { // another batch size: times are not comparable
		t.n, t.base, t.probing, t.steps = n, t.base[:0], false, 0
	}
	if !t.probing && t.steps >= t.every && len(t.base) >= tuneProbe {
		t.probing, t.probe = true, t.probe[:0]
		t.other = 1
		if t.cur == 1 {
			t.other = t.max
		}
		return t.other
	}
	if t.probing {
		return t.other
	}
	return t.cur
}

// done records a decode step's time per token at the count next returned.
func (t *threadTuner) done(perToken time.Duration) {
	if t == nil || t.max < 2 {
		return
	}
	if !t.probing {
		t.steps++
		t.base = append(t.base, perToken)
		if len(t.base) > tuneProbe {
			t.base = t.base[len(t.base)-tuneProbe:]
		}
		return
	}
	t.probe = append(t.probe, perToken)
	if len(t.probe) < tuneProbe {
		return
	}
	if mean(t.probe) < time.Duration(tuneGain*float64(mean(t.base))) {
		t.cur = t.other
		t.base = append(t.base[:0], t.probe...)
		t.every = tuneEvery
	} else {
		t.every = min(2*t.every, tuneMax) // a settled machine is probed less and less
	}
	t.probing, t.steps = false, 0
}

// mean, not median: under contention most steps run at the quiet rate
// and a few stall for a time slice while a thread is descheduled; the
// stalls are what throughput loses.
func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}
