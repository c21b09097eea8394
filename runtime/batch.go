package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/memosrt/memosrt/runtime/llama"
)

// ErrSeqBusy is returned when a request names a sequence that another
// running request is using.
var ErrSeqBusy = errors.New("runtime: sequence busy")

// ErrNoLoRA is returned for a request with adapters on an engine loaded
// without Options.LoRA.
var ErrNoLoRA = errors.New("runtime: engine loaded without LoRA support (Options.LoRA)")

// AdapterRef is a loaded LoRA adapter attached to a request at a scale.
type AdapterRef struct {
	Name    string         // registry name, part of AdapterKey
	Adapter *llama.Adapter // loaded adapter
	Scale   float32        // 0 attaches it without effect; 1 is full strength
}

// AdapterKey returns the canonical key of an adapter set: "name:scale"
// pairs sorted by name and joined by commas; "" for none. KV state computed
// under one key is valid only under the same key.
func AdapterKey(refs []AdapterRef) string {
	if len(refs) == 0 {
		return ""
	}
	parts := make([]string, len(refs))
	for i, r := range refs {
		parts[i] = r.Name + ":" + strconv.FormatFloat(float64(r.Scale), 'g', -1, 32)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// Request is one generation (or, with PrefillOnly, one prefill) on one sequence.
type Request struct {
	// Seq is the sequence to use, in [0, NSeqMax).
	Seq int
	// Tokens is the whole prompt.
	Tokens []Token
	// NPast is how many leading prompt tokens seq already holds (restored or
	// left from an earlier turn); they are not decoded again. At least the
	// last prompt token is always decoded, since restored state has no logits.
	NPast int
	// PrefillOnly decodes Tokens[NPast:] and samples nothing (no logits).
	PrefillOnly bool
	// Background requests get batch room only while no foreground request
	// is running, in chunks of at most BackgroundChunk tokens, so that they
	// never delay foreground prefill or decode by more than one small batch.
	Background bool
	// Adapters is the LoRA set for this request (nil: none). llama.cpp
	// attaches adapters per context, so requests with different sets do not
	// share a batch; a request waits until the running set drains.
	Adapters []AdapterRef
	// Sampling chooses the next token; zero value is greedy.
	Sampling llama.SamplerParams
	// MaxTokens caps generated tokens; <= 0 means until n_ctx or end of generation.
	MaxTokens int
	// Stop strings end generation; the stop string is not part of the output.
	Stop []string
	// OnText, if set, receives the output text as it is produced, in order
	// (never a split UTF-8 character or a prefix of a stop string). It runs on
	// the engine's batch goroutine: it must return quickly. An error from it
	// ends the request with that error.
	OnText func(string) error
	// Start is when the request began, for TTFT; zero means Generate's start.
	Start time.Time
}

// Result reports one generation. Durations are wall-clock.
type Result struct {
	Text         string        `json:"response"`
	Tokens       []Token       `json:"-"`
	PromptTokens int           `json:"prompt_tokens"` // len(Request.Tokens)
	CachedTokens int           `json:"cached_tokens"` // prompt tokens not decoded (NPast used)
	TTFT         time.Duration `json:"-"`             // Start to first generated token sampled
	PrefillTime  time.Duration `json:"-"`             // decoding the uncached prompt tokens
	EvalTokens   int           `json:"eval_tokens"`   // generated tokens
	EvalTime     time.Duration `json:"-"`             // first token sampled to last
	DoneReason   string        `json:"done_reason"`   // "stop" (EOG or stop string) or "length"
}

// job is a Request in flight on the batch goroutine.
type job struct {
	ctx         context.Context
	req         Request
	key         string // AdapterKey(req.Adapters)
	res         Result
	sampler     *llama.Sampler
	out         *textOut
	pending     []Token // tokens still to decode
	pos         int     // position of pending[0]
	stepPos     int     // pos at the start of the current step
	stepPending []Token // pending at the start of the current step
	idx         int     // batch index of this job's logits row, -1 if none this step
	solo        bool    // its last batch failed: decode it alone next
	start       time.Time
	tPre        time.Time
	first       time.Time
	err         error
	done        chan struct{}
}

// batcher holds the queue of the batch goroutine.
type batcher struct {
	mu      sync.Mutex // guards queue, active, stopped, curKey
	cond    *sync.Cond
	queue   []*job
	active  []*job
	stopped bool
	curKey  string
	wg      sync.WaitGroup
	nActive atomic.Int32
	nQueued atomic.Int32
}

// BackgroundChunk is the most tokens a background request decodes per batch.
const BackgroundChunk = 64

// Background work yields to foreground work, but not for good: once it has
// been held back for BackgroundMaxWait, a chunk of at most BackgroundShare
// tokens joins the next batch beside the foreground requests. Under
// sustained load a pack job therefore still advances (about 80 tokens/s
// of prefill), and a foreground step carries at most that many extra
// tokens once per BackgroundMaxWait. Without it, a tier job never finished
// under load and the pack writes and cube deletes queued behind it waited
// with it.
const (
	BackgroundMaxWait = 200 * time.Millisecond
	BackgroundShare   = 16
)

func (e *Engine) startBatcher() {
	e.b.cond = sync.NewCond(&e.b.mu)
	e.b.wg.Add(1)
	go e.loop()
}

// stopBatcher fails queued and active jobs with ErrClosed and waits for the
// batch goroutine to exit.
func (e *Engine) stopBatcher() {
	e.b.mu.Lock()
	e.b.stopped = true
	e.b.cond.Broadcast()
	e.b.mu.Unlock()
	e.b.wg.Wait()
}

// Queue reports requests running in the batch and waiting for admission.
func (e *Engine) Queue() (active, queued int) {
	return int(e.b.nActive.Load()), int(e.b.nQueued.Load())
}

// Generate runs req: it decodes the uncached prompt suffix and samples until
// an end-of-generation token, a stop string, MaxTokens or n_ctx. It is safe
// for concurrent use: requests on different sequences advance together in one
// llama_decode batch (continuous batching, as llama.cpp's server does).
// Cancelling ctx stops the request within one batch; ctx's error is returned
// with the partial result. After return seq holds the prompt plus the
// generated tokens (for reuse on the next turn); after an error during the
// prompt it holds only the first NPast tokens.
//
// When Generate returns, the request has left the engine: a next request
// on seq may follow at once. It returns ErrSeqBusy (wrapped) while another
// request on seq is queued or running, ErrEmptyPrompt, ErrPromptTooLong,
// ErrNoLoRA, ErrClosed, or an error from decoding, sampling or OnText.
func (e *Engine) Generate(ctx context.Context, req Request) (Result, error) {
	start := req.Start
	if start.IsZero() {
		start = time.Now()
	}
	j := &job{ctx: ctx, req: req, key: AdapterKey(req.Adapters), start: start, idx: -1, done: make(chan struct{})}
	j.res.PromptTokens = len(req.Tokens)
	if len(req.Tokens) == 0 {
		return j.res, ErrEmptyPrompt
	}
	if req.Seq < 0 || req.Seq >= e.opts.NSeqMax {
		return j.res, fmt.Errorf("runtime: seq %d not in [0, %d)", req.Seq, e.opts.NSeqMax)
	}
	if len(req.Adapters) > 0 && !e.opts.LoRA {
		return j.res, ErrNoLoRA
	}
	if len(req.Tokens) >= e.kv.NCtx || req.PrefillOnly && len(req.Tokens) > e.kv.NCtx {
		return j.res, fmt.Errorf("%w: %d prompt tokens, n_ctx %d", ErrPromptTooLong, len(req.Tokens), e.kv.NCtx)
	}
	npast := max(0, min(req.NPast, len(req.Tokens)-1))
	if req.PrefillOnly {
		npast = max(0, min(req.NPast, len(req.Tokens)))
	}
	j.res.CachedTokens = npast
	j.pos = npast
	j.pending = req.Tokens[npast:]
	if err := ctx.Err(); err != nil {
		return j.res, err
	}
	if req.PrefillOnly && len(j.pending) == 0 {
		if err := e.lock(); err != nil {
			return j.res, err
		}
		defer e.mu.Unlock()
		e.ctx.SeqRemove(req.Seq, npast, -1)
		return j.res, nil
	}
	if !req.PrefillOnly {
		// made here, not at admission, so a bad grammar is an error before
		// anything is queued; the prompt seeds the repeat-penalty window
		s, err := llama.NewSampler(e.model, req.Sampling, req.Tokens)
		if err != nil {
			return j.res, fmt.Errorf("runtime: sampler: %w", err)
		}
		j.sampler = s
	}
	e.b.mu.Lock()
	if e.b.stopped {
		e.b.mu.Unlock()
		j.sampler.Close()
		return j.res, ErrClosed
	}
	for _, o := range e.b.queue {
		if o.req.Seq == req.Seq {
			e.b.mu.Unlock()
			j.sampler.Close()
			return j.res, fmt.Errorf("%w: %d", ErrSeqBusy, req.Seq)
		}
	}
	for _, o := range e.b.active {
		if o.req.Seq == req.Seq {
			e.b.mu.Unlock()
			j.sampler.Close()
			return j.res, fmt.Errorf("%w: %d", ErrSeqBusy, req.Seq)
		}
	}
	if !req.Background {
		defer e.BeginForeground()()
	}
	e.b.queue = append(e.b.queue, j)
	e.b.nQueued.Add(1)
	e.b.cond.Broadcast()
	e.b.mu.Unlock()
	// a request still queued when ctx ends is removed by the loop on its next
	// pass; wake it so that happens promptly.
	stop := context.AfterFunc(ctx, func() {
		e.b.mu.Lock()
		e.b.cond.Broadcast()
		e.b.mu.Unlock()
	})
	defer stop()
	<-j.done
	return j.res, j.err
}

// Prefill decodes toks into seq at positions [pos0, pos0+len(toks)) through
// the batch goroutine (foreground), keeping no logits. On error the positions
// from pos0 on are removed again.
func (e *Engine) Prefill(ctx context.Context, seq int, toks []Token, pos0 int) error {
	if len(toks) == 0 {
		return nil
	}
	full := make([]Token, pos0+len(toks))
	copy(full[pos0:], toks)
	_, err := e.Generate(ctx, Request{Seq: seq, Tokens: full, NPast: pos0, PrefillOnly: true})
	return err
}

// PrefillRequest is Prefill with adapters and priority.
func (e *Engine) PrefillRequest(ctx context.Context, seq int, toks []Token, adapters []AdapterRef, background bool) error {
	_, err := e.Generate(ctx, Request{Seq: seq, Tokens: toks, PrefillOnly: true, Adapters: adapters, Background: background})
	return err
}

// finish completes j. It drops j from the active set before waking its
// caller, so the sequence is free again by the time Generate returns: a
// caller that reuses it at once (a slot, a job's next prefill chunk) never
// meets ErrSeqBusy from its own finished request. Caller holds e.b.mu.
func (e *Engine) finish(j *job, err error) {
	e.b.active = slices.DeleteFunc(e.b.active, func(o *job) bool { return o == j })
	e.b.nActive.Store(int32(len(e.b.active)))
	if j.sampler != nil {
		j.sampler.Close()
		j.sampler = nil
	}
	if err == nil && j.out != nil {
		err = j.out.flush()
	}
	if j.out != nil {
		j.res.Text = j.out.text()
	}
	if !j.first.IsZero() {
		j.res.EvalTime = time.Since(j.first)
	}
	j.err = err
	close(j.done)
}

// loop is the batch goroutine: it admits queued requests, builds one batch
// from every running request (decode tokens first, then prompt chunks),
// decodes it, and samples for each request whose logits it produced.
func (e *Engine) loop() {
	defer e.b.wg.Done()
	for {
		e.b.mu.Lock()
		for !e.b.stopped && len(e.b.queue) == 0 && len(e.b.active) == 0 {
			e.b.cond.Wait()
		}
		if e.b.stopped {
			all := append(e.b.queue, e.b.active...)
			e.b.queue, e.b.active = nil, nil
			e.b.nQueued.Store(0)
			for _, j := range all {
				e.finish(j, ErrClosed)
			}
			e.b.mu.Unlock()
			return
		}
		e.admit()
		step := slices.Clone(e.b.active)
		e.b.mu.Unlock()
		if len(step) == 0 {
			continue
		}
		e.mu.Lock()
		worked := e.step(step)
		ended := e.ended
		e.ended = nil
		e.mu.Unlock()
		// jobs that ended in the step finish under the batcher lock only:
		// the lock order is batcher, then engine (see the package doc)
		e.b.mu.Lock()
		for _, d := range ended {
			e.finish(d.j, d.err)
		}
		if !worked && !e.b.stopped && !e.queuedForeground() && e.fg.Load() > 0 {
			// only background work, held back while a foreground caller is
			// in flight: sleep until it leaves, foreground work is queued,
			// or BackgroundMaxWait passes (then the step gives it a share)
			t := time.AfterFunc(BackgroundMaxWait, func() {
				e.b.mu.Lock()
				e.b.cond.Broadcast()
				e.b.mu.Unlock()
			})
			e.b.cond.Wait()
			t.Stop()
		}
		e.b.mu.Unlock()
	}
}

// BeginForeground marks a foreground request in flight until the returned
// function is called (once). While any is in flight, background requests get
// no batch room, and a running background-only decode is aborted and retried
// later, so foreground TTFT does not wait behind background prefill. Generate
// marks its own non-background requests; callers bracket the whole request
// (restore, then Generate) with it.
func (e *Engine) BeginForeground() (end func()) {
	e.fg.Add(1)
	if id := e.bgStep.Load(); id != 0 && id == e.stepID.Load() {
		e.ctx.SetAbort(true) // the step retries its background work
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if e.fg.Add(-1) == 0 {
				e.b.mu.Lock()
				e.b.cond.Broadcast()
				e.b.mu.Unlock()
			}
		})
	}
}

// Foreground returns how many foreground requests are in flight
// (BeginForeground): work that runs beside the engine, not through it
// (training a LoRA adapter), waits while it is above 0 to keep to
// background priority.
func (e *Engine) Foreground() int { return int(e.fg.Load()) }

// DetachAdapter removes a from the context if attached and forgets the
// current adapter set, so the next request re-applies its own. Call it before
// freeing an adapter that requests may have used.
func (e *Engine) DetachAdapter(a *llama.Adapter) {
	e.b.mu.Lock()
	defer e.b.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.ctx.RemoveAdapter(a)
	e.ctx.DropGraph()
	e.b.curKey = "\x00detached"
}

// queuedForeground reports whether a foreground job waits in the queue.
// Caller holds e.b.mu.
func (e *Engine) queuedForeground() bool {
	for _, j := range e.b.queue {
		if !j.req.Background {
			return true
		}
	}
	return false
}

// admit moves queued jobs into the active set: cancelled ones are failed;
// jobs whose adapter set differs from the running one wait until the active
// set drains, then the adapters are switched; jobs queued after such a
// foreground job wait with it (first come, first served). A foreground job waiting for
// a switch goes before background work: background jobs are not admitted
// meanwhile, and when only background jobs are active (held back while
// foreground callers are in flight, so they would never drain) they go
// back to the queue with their progress (pos, pending) kept. Without that,
// a LoRA request arriving during a pack warm waited for the warm, and the
// warm for the LoRA request, for good. Caller holds e.b.mu.
func (e *Engine) admit() {
	fgSwitch := false
	for _, j := range e.b.queue {
		if !j.req.Background && j.key != e.b.curKey && j.ctx.Err() == nil {
			fgSwitch = true
			break
		}
	}
	if fgSwitch && len(e.b.active) > 0 && !slices.ContainsFunc(e.b.active, func(j *job) bool { return !j.req.Background }) {
		e.b.queue = append(e.b.queue, e.b.active...) // behind the foreground jobs
		e.b.active = nil
	}
	var keep []*job
	barrier := false // a foreground job waits for a switch: nothing after it is admitted
	for _, j := range e.b.queue {
		if err := j.ctx.Err(); err != nil {
			e.finish(j, err)
			continue
		}
		if fgSwitch && j.req.Background || barrier {
			keep = append(keep, j)
			continue
		}
		if len(e.b.active) == 0 && j.key != e.b.curKey {
			e.mu.Lock()
			err := e.applyAdapters(j.req.Adapters)
			e.mu.Unlock()
			if err != nil {
				e.finish(j, err)
				continue
			}
			e.b.curKey = j.key
		}
		if j.key != e.b.curKey {
			// first come, first served across adapter sets: jobs queued
			// after this one wait too, so the running set drains and the
			// switch happens (else a steady stream on the current set
			// starved it)
			keep = append(keep, j)
			barrier = !j.req.Background
			continue
		}
		e.mu.Lock()
		if !j.req.PrefillOnly && j.out == nil { // a parked job keeps its text
			j.out = newTextOut(j.req.Stop, j.req.OnText)
		}
		e.ctx.SeqRemove(j.req.Seq, j.pos, -1)
		e.mu.Unlock()
		j.tPre = time.Now()
		e.b.active = append(e.b.active, j)
	}
	e.b.queue = keep
	e.b.nQueued.Store(int32(len(keep)))
	e.b.nActive.Store(int32(len(e.b.active)))
}

// applyAdapters makes refs the context's adapter set. Caller holds e.mu.
func (e *Engine) applyAdapters(refs []AdapterRef) error {
	if e.closed {
		return ErrClosed
	}
	e.ctx.ClearAdapters()
	e.ctx.DropGraph() // the previous graph holds the previous adapters
	for _, r := range refs {
		if r.Adapter == nil {
			e.ctx.ClearAdapters()
			return fmt.Errorf("runtime: adapter %q not loaded", r.Name)
		}
		if err := e.ctx.SetAdapter(r.Adapter, r.Scale); err != nil {
			e.ctx.ClearAdapters()
			return fmt.Errorf("runtime: adapter %q: %w", r.Name, err)
		}
	}
	return nil
}

// step runs one llama_decode over the jobs and reports whether it decoded
// anything. Caller holds e.mu.
func (e *Engine) step(jobs []*job) bool {
	var live []*job
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			e.ctx.SeqRemove(j.req.Seq, j.pos, -1)
			e.fail(j, err)
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return true
	}
	fg := e.fg.Load() > 0
	for _, j := range live {
		if !j.req.Background {
			fg = true
		}
	}
	// decode tokens first (one each), then prompt chunks, foreground first
	slices.SortStableFunc(live, func(a, b *job) int {
		ra, rb := rank(a), rank(b)
		return ra - rb
	})
	// after a failed batch its requests run alone, one per step, until each
	// has passed a step (see below)
	for i, j := range live {
		if j.solo && (!j.req.Background || !fg) {
			live = live[i : i+1]
			break
		}
	}
	e.batch.Clear()
	budget := e.batch.Cap()
	// background work held back too long gets a share (BackgroundMaxWait)
	share := 0
	if fg && slices.ContainsFunc(live, func(j *job) bool { return j.req.Background && len(j.pending) > 0 }) {
		if e.bgHeld.IsZero() {
			e.bgHeld = time.Now()
		} else if time.Since(e.bgHeld) >= BackgroundMaxWait {
			share = BackgroundShare
		}
	}
	shared := share > 0
	var in []*job
	for _, j := range live {
		j.idx = -1
		j.stepPos = j.pos
		j.stepPending = j.pending
		if j.req.Background && fg && share == 0 {
			continue
		}
		n := min(len(j.pending), budget)
		if j.req.Background {
			n = min(n, BackgroundChunk)
			if fg {
				n = min(n, share)
				share -= n
			}
			if n > 0 {
				e.bgHeld = time.Time{}
			}
		}
		if n == 0 {
			continue
		}
		last := n == len(j.pending) && !j.req.PrefillOnly
		for k := 0; k < n; k++ {
			e.batch.Add(j.pending[k], j.pos+k, j.req.Seq, last && k == n-1)
		}
		if last {
			j.idx = e.batch.Len() - 1
		}
		j.pending = j.pending[n:]
		j.pos += n
		budget -= n
		in = append(in, j)
	}
	if len(in) == 0 {
		return false
	}
	// abort the decode only if every request in it has been cancelled
	// (a callback firing after its step ended checks the step id first)
	var cancelled atomic.Int32
	n := int32(len(in))
	id := e.stepID.Add(1)
	e.ctx.SetAbort(false)
	bgOnly := true
	for _, j := range in {
		bgOnly = bgOnly && j.req.Background
	}
	if bgOnly && !shared {
		e.bgStep.Store(id) // BeginForeground may abort it; a share step (small, owed) is not aborted
	}
	stops := make([]func() bool, 0, len(in))
	for _, j := range in {
		stops = append(stops, context.AfterFunc(j.ctx, func() {
			if cancelled.Add(1) == n && e.stepID.Load() == id {
				e.ctx.SetAbort(true)
			}
		}))
	}
	// one token per sequence, all past their prompt: a decode step, whose
	// thread count the tuner may lower (threads.go)
	decode := e.batch.Len() == len(in)
	for _, j := range in {
		decode = decode && j.res.EvalTokens > 0
	}
	if decode {
		if n := e.tuner.next(len(in)); n > 0 && n != e.threads {
			e.ctx.SetThreads(n, e.opts.Threads)
			e.threads = n
		}
	}
	t0 := time.Now()
	err := e.ctx.Decode(e.batch)
	if decode && err == nil {
		e.tuner.done(time.Since(t0) / time.Duration(len(in)))
	}
	e.stepID.Add(1)
	e.bgStep.Store(0)
	for _, s := range stops {
		s()
	}
	e.ctx.SetAbort(false)
	if errors.Is(err, llama.ErrAborted) {
		// aborted for a foreground arrival or a cancellation: cancelled
		// requests end, the others rewind this step and run again later
		for _, j := range in {
			e.ctx.SeqRemove(j.req.Seq, j.stepPos, -1)
			if cerr := j.ctx.Err(); cerr != nil {
				if j.res.EvalTokens == 0 {
					e.ctx.SeqRemove(j.req.Seq, j.res.CachedTokens, -1)
				}
				e.fail(j, cerr)
				continue
			}
			j.pos, j.pending, j.idx = j.stepPos, j.stepPending, -1
		}
		return true
	}
	if err != nil && len(in) > 1 {
		// one request's tokens may be what failed (no KV room for all of
		// them together): never fail its batch-mates with it. Rewind the
		// step and decode each of them alone until each has passed a step.
		for _, j := range in {
			e.ctx.SeqRemove(j.req.Seq, j.stepPos, -1)
			j.pos, j.pending, j.idx = j.stepPos, j.stepPending, -1
			j.solo = true
		}
		e.log.Debug("batch decode failed; retrying its requests one by one", "requests", len(in), "err", err)
		return true
	}
	if err != nil {
		for _, j := range in {
			// drop what this step wrote; a failure in the prompt leaves NPast tokens
			from := j.stepPos
			if j.res.EvalTokens == 0 {
				from = j.res.CachedTokens
			}
			e.ctx.SeqRemove(j.req.Seq, from, -1)
			if cerr := j.ctx.Err(); cerr != nil {
				e.fail(j, cerr)
			} else {
				e.fail(j, err)
			}
		}
		return true
	}
	for _, j := range in {
		j.solo = false
		if len(j.pending) == 0 && j.req.PrefillOnly {
			j.res.PrefillTime = time.Since(j.tPre)
			e.fail(j, nil)
			continue
		}
		if j.idx < 0 {
			continue
		}
		e.sampleOne(j)
	}
	return true
}

func rank(j *job) int {
	r := 0
	if j.req.Background {
		r += 2
	}
	if j.res.EvalTokens == 0 && len(j.pending) > 1 {
		r++ // prompt chunk after decode tokens
	}
	return r
}

// endedJob is a job that ended during a step, to finish after it.
type endedJob struct {
	j   *job
	err error
}

// fail ends j in the current step (with err, nil on success): the loop
// finishes it once the step has released the engine lock. Caller holds
// e.mu (the step).
func (e *Engine) fail(j *job, err error) {
	for _, d := range e.ended {
		if d.j == j {
			return // ended already in this step
		}
	}
	e.ended = append(e.ended, endedJob{j, err})
}

// sampleOne samples j's next token from its logits row and queues it.
// Caller holds e.mu.
func (e *Engine) sampleOne(j *job) {
	tok, err := j.sampler.Sample(e.ctx, j.idx)
	if err != nil {
		e.fail(j, err)
		return
	}
	if j.first.IsZero() {
		j.first = time.Now()
		j.res.TTFT = j.first.Sub(j.start)
		j.res.PrefillTime = j.first.Sub(j.tPre)
	}
	if e.model.IsEOG(tok) {
		j.res.DoneReason = "stop"
		e.fail(j, nil)
		return
	}
	j.res.Tokens = append(j.res.Tokens, tok)
	j.res.EvalTokens++
	hit, err := j.out.add(e.model.TokenPiece(tok, false))
	if err != nil {
		e.fail(j, err)
		return
	}
	if hit {
		j.res.DoneReason = "stop"
		e.fail(j, nil)
		return
	}
	if j.req.MaxTokens > 0 && j.res.EvalTokens >= j.req.MaxTokens || j.pos+1 >= e.kv.NCtx {
		j.res.DoneReason = "length"
		e.fail(j, nil)
		return
	}
	j.pending = []Token{tok}
}

// AcquireSeq takes a free sequence id from the engine's pool, waiting until
// one is free or ctx ends. Callers that pick sequence ids themselves must not
// mix that with the pool. Release it with ReleaseSeq.
func (e *Engine) AcquireSeq(ctx context.Context) (int, error) {
	select {
	case s := <-e.seqs:
		return s, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// TryAcquireSeq is AcquireSeq without waiting; ok is false when none is free.
func (e *Engine) TryAcquireSeq() (seq int, ok bool) {
	select {
	case s := <-e.seqs:
		return s, true
	default:
		return -1, false
	}
}

// ReleaseSeq returns seq to the pool. The caller clears or keeps its cells.
func (e *Engine) ReleaseSeq(seq int) {
	select {
	case e.seqs <- seq:
	default: // released twice: ignore rather than block
	}
}
