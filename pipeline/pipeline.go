package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/pipeline/convpack"
	"github.com/memosrt/memosrt/pipeline/request"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
	"github.com/memosrt/memosrt/toolcall"
)

// Chat runs one chat turn in req.Cube: req.Messages is the conversation,
// the last turn usually the user's. The prompt is assembled from the tiers
// (the cube's pack, memories retrieved for the last user turn, the
// conversation; see layout.Layout), its longest cached prefix is reused
// (a free sequence that holds it, the cube's resident pack, or a stored
// pack), the rest is prefilled and the answer generated; afterwards the
// conversation's KV state is saved in the background (unless NoPersist)
// and the memories used are counted towards their heat. Errors:
// *FieldError (HTTP 400) for a bad request, ErrUnknownCube, ErrBusy,
// ErrNoModel, ErrClosed, lora errors for adapters, ctx's error.
func (p *Pipeline) Chat(ctx context.Context, req Request) (*Response, error) {
	if len(req.Messages) == 0 {
		return nil, badField("messages", "at least one message is required")
	}
	return p.closing(p.do(ctx, &req, true, false))
}

// Generate completes req.Prompt: with a cube, the prompt is a user turn
// after the cube's pack (and req.System as a system turn), as Chat does;
// Raw sends the prompt as is; Context continues an earlier exchange. The
// state is not saved as a conversation pack. Errors as Chat.
func (p *Pipeline) Generate(ctx context.Context, req Request) (*Response, error) {
	return p.closing(p.do(ctx, &req, false, false))
}

// closing reports a request that Close cancelled (its timeout passed) as
// ErrClosed, not as the caller's cancellation.
func (p *Pipeline) closing(res *Response, err error) (*Response, error) {
	if err != nil && p.base.Err() != nil && errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: cancelled at shutdown: %w", ErrClosed, err)
	}
	return res, err
}

// cubeOf is CheckCube returning the cube's record (the zero Cube for "").
func (p *Pipeline) cubeOf(ctx context.Context, cube string) (textmem.Cube, error) {
	if cube == "" {
		return textmem.Cube{}, nil
	}
	if !textmem.ValidCube(cube) {
		return textmem.Cube{}, badField("cube", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", cube)
	}
	return p.cubes.Get(ctx, cube)
}

// rendered is a request's assembled prompt.
type rendered struct {
	text   string
	toks   []int32
	prompt layout.Prompt // with a cube: pack, retrieved memories
}

// dropMemories leaves memories out of a prompt that does not fit.
type dropMemories int

const (
	dropNone      dropMemories = iota
	dropRetrieved              // no retrieval: the pack and the conversation
	dropAll                    // no memories at all
)

// render assembles the prompt of req (see Chat and Generate).
func (p *Pipeline) render(ctx context.Context, l *loaded, req *Request) (rendered, error) {
	return p.renderWith(ctx, l, req, dropNone)
}

func (p *Pipeline) renderWith(ctx context.Context, l *loaded, req *Request, drop dropMemories) (rendered, error) {
	var r rendered
	eng := l.eng
	if len(req.Context) > 0 {
		n := int32(eng.Shape().NVocab)
		for i, t := range req.Context {
			if t < 0 || t >= n {
				return r, badField(fmt.Sprintf("context[%d]", i), "token %d not in [0, %d)", t, n)
			}
		}
		text := req.Prompt
		if tmpl := l.lay.Template(); !req.Raw && tmpl != "" {
			t, err := eng.Model().ApplyChatTemplate(tmpl, []llama.ChatMessage{{Role: "user", Content: req.Prompt}}, true)
			if err != nil {
				return r, badField("prompt", "chat template: %v", err)
			}
			text = t
		} else if !req.Raw {
			text = "\n" + text
		}
		rt, err := eng.Tokenize(text, false)
		if err != nil {
			return r, err
		}
		r.text = eng.Detokenize(req.Context) + text
		r.toks = append(slices.Clone(req.Context), rt...)
		return r, nil
	}
	if req.Raw {
		toks, err := eng.Tokenize(req.Prompt, true)
		r.text, r.toks = req.Prompt, toks
		return r, err
	}
	in := layout.Input{Cube: req.Cube, Messages: request.Turns(req), NoRetrieve: drop >= dropRetrieved}
	if drop == dropAll {
		in.Cube = ""
	}
	if in.Cube != "" {
		members, err := p.tiers.HotSet(ctx, req.Cube)
		if err != nil {
			return r, err
		}
		in.Members = members
		if in.Shared, err = p.sharedInput(ctx, req); err != nil {
			return r, err
		}
	}
	pk, err := l.lay.Assemble(ctx, in)
	if errors.Is(err, llama.ErrTemplate) {
		return r, badField(request.PromptField(req), "chat template: %v", err)
	}
	if err != nil {
		return r, err
	}
	r.text, r.toks, r.prompt = pk.Head+pk.Rest, pk.Tokens, pk
	return r, nil
}

// truncate renders req with its oldest non-system messages dropped, fewest
// first, until the prompt holds at most fit tokens; the last message always
// stays (the caller then reports a prompt too long).
func (p *Pipeline) truncate(ctx context.Context, l *loaded, req *Request, fit int) (rendered, error) {
	msgs := req.Messages
	var r rendered
	for i := 1; i < len(msgs); i++ {
		kept := make([]Message, 0, len(msgs))
		for _, m := range msgs[:i] {
			if m.Role == "system" {
				kept = append(kept, m)
			}
		}
		cut := *req
		cut.Messages = append(kept, msgs[i:]...)
		var err error
		if r, err = p.render(ctx, l, &cut); err != nil || len(r.toks) <= fit {
			if err == nil && i > 0 {
				p.log.Debug("oldest messages dropped to fit the context", "dropped", i-len(kept), "prompt_tokens", len(r.toks))
			}
			return r, err
		}
	}
	return r, nil
}

// turn is one request's state as it goes through the stages of do; each
// stage reads what the ones before it set. Its deferred releases (the
// model reference, the adapter lease, the slot, the foreground mark) run
// in reverse order when do returns.
type turn struct {
	ctx   context.Context
	req   *Request
	chat  bool
	start time.Time // for TTFT: Request.Start or the call
	// background runs the request at background priority (an extraction
	// job, GenerateBackground): it yields batch room to foreground
	// requests, records nothing.
	background bool

	// validate
	grammar string       // the tool-call grammar, "" for none
	gen     uint64       // the cube's deletion count when the turn began
	cube    textmem.Cube // its record (the zero Cube without one)
	// readGens are the read cubes' deletion counts (Request.ReadCubes
	// order); shared is their shared packs' scope (sharedScope), "" none
	readGens []uint64
	shared   string
	// assemble
	l      *loaded
	r      rendered
	limit  int // the context this turn may fill, tokens
	maxTok int // generated tokens at most
	sp     Sampling
	// admit
	ad    adapterSet
	scope string // slots.Slot scope: cube, deletion count, adapters
	sl    *slots.Slot
	slotN int // prompt tokens the slot holds already
	// KV source
	src kvSource
	// decode
	held int // tokens the sequence holds afterwards

	out     *Response
	release []func()
}

// onDone adds f to what runs when the turn ends (in reverse order).
func (t *turn) onDone(f func()) { t.release = append(t.release, f) }

// do is the one request pipeline: every chat turn and completion goes
// through its stages in order (validate, assemble, admit, KV source,
// decode, persist, record); with Options.Upstream, validate and then the
// upstream backend, which assembles the same prompt.
func (p *Pipeline) do(ctx context.Context, req *Request, chat, background bool) (*Response, error) {
	t := &turn{ctx: ctx, req: req, chat: chat, background: background, start: req.Start}
	if t.start.IsZero() {
		t.start = time.Now()
	}
	defer func() {
		for i := len(t.release) - 1; i >= 0; i-- {
			t.release[i]()
		}
	}()
	if err := p.validate(t); err != nil {
		return nil, err
	}
	if p.up != nil {
		return p.upstreamTurn(t)
	}
	if err := p.assemble(t); err != nil {
		return nil, err
	}
	if req.RenderOnly {
		return t.out, nil
	}
	for _, stage := range []func(*turn) error{p.admit, p.kvSource} {
		if err := stage(t); err != nil {
			return nil, err
		}
	}
	if err := p.decode(t); err != nil {
		t.out.Usage.TotalDuration = time.Since(t.start)
		return t.out, err
	}
	p.persistTurn(t)
	p.record(t)
	t.out.Usage.TotalDuration = time.Since(t.start)
	return t.out, nil
}

// validate checks the request and its cube: sampling options, its id (a
// new one when none), roles, record mode, tools (their grammar), a prompt
// for a completion.
func (p *Pipeline) validate(t *turn) error {
	req := t.req
	if err := request.CheckOptions(req); err != nil {
		return err
	}
	if req.ID == "" {
		req.ID = request.NewResponseID()
	} else if err := request.CheckID(req.ID); err != nil {
		return err
	}
	for i, m := range req.Messages {
		if err := request.CheckRole(fmt.Sprintf("messages[%d].role", i), m.Role); err != nil {
			return err
		}
	}
	if _, err := request.ParseRecordMode("record", string(req.Record)); err != nil {
		return err
	}
	var err error
	if t.grammar, err = request.ToolSpec(req).Grammar(); err != nil {
		return err
	}
	t.gen = p.gen(req.Cube) // before the cube check: a delete after it is seen
	if t.cube, err = p.cubeOf(t.ctx, req.Cube); err != nil {
		return err
	}
	if t.readGens, err = p.checkReadCubes(t.ctx, req); err != nil {
		return err
	}
	t.shared = convpack.SharedScope(req.ReadCubes, t.readGens)
	if !t.chat && req.Prompt == "" && len(req.Context) == 0 {
		return badField("prompt", "empty prompt")
	}
	return nil
}

// assemble takes the model (loading it if needed) and renders the prompt
// from the tiers, fitted to the context: the oldest turns dropped for a
// chat (as Ollama's chatPrompt), then retrieval, then the pack; and sets
// the generation budget and the sampler.
func (p *Pipeline) assemble(t *turn) error {
	req, ctx := t.req, t.ctx
	asked := time.Now()
	l, release, err := p.use(ctx, req.Model, req.KeepAlive)
	if err != nil {
		return err
	}
	t.l = l
	t.onDone(release)
	// getting the loaded model: its load, a wait for another request's
	// load, or finding it loaded; always reported, as Ollama's
	// load_duration (its scheduler's checkpointLoaded - checkpointStart)
	loadTime := max(time.Since(asked), time.Nanosecond)
	r, err := p.render(ctx, l, req)
	if err != nil {
		return err
	}
	out := &Response{ID: req.ID}
	setMemories(out, r.prompt)
	out.Usage.PromptTokens, out.Usage.LoadDuration = len(r.toks), loadTime
	t.out = out
	if req.RenderOnly {
		out.Rendered = r.text
		return nil
	}
	limit := l.eng.NCtx()
	if req.NumCtx > 0 && req.NumCtx < limit {
		limit = req.NumCtx // served by the loaded context: no reload
	}
	if t.chat && len(r.toks) > limit-minBudget && len(req.Messages) > 1 {
		// as Ollama's chatPrompt: drop the oldest turns (system turns stay,
		// the last turn always) until the prompt fits
		if r, err = p.truncate(ctx, l, req, limit-minBudget); err != nil {
			return err
		}
		setMemories(out, r.prompt)
	}
	if req.Cube != "" && len(r.toks) > limit-minBudget && len(r.prompt.Retrieved)+len(r.prompt.Preferences)+len(r.prompt.Pack) > 0 {
		// the memories' token budgets are estimates: without retrieval,
		// then without the pack, rather than refuse the turn
		for _, drop := range []dropMemories{dropRetrieved, dropAll} {
			if r, err = p.renderWith(ctx, l, req, drop); err != nil {
				return err
			}
			if len(r.toks) <= limit-minBudget {
				break
			}
		}
		setMemories(out, r.prompt)
	}
	toks := r.toks
	out.Usage.PromptTokens = len(toks)
	if len(toks) == 0 {
		return badField(request.PromptField(req), "empty prompt")
	}
	if len(toks) >= limit {
		return badField(request.PromptField(req), "prompt is %d tokens, context is %d (num_ctx %d, loaded n_ctx %d)", len(toks), limit, req.NumCtx, l.eng.NCtx())
	}
	maxTok := req.NumPredict
	switch {
	case maxTok < -2:
		return badField("options.num_predict", "%d < -2 (-1: no cap, -2: fill the context, 0: the server default)", maxTok)
	case maxTok == 0:
		maxTok = p.opts.DefaultNumPredict
	}
	if maxTok <= 0 || maxTok > limit-len(toks) {
		maxTok = limit - len(toks)
	}
	sp := req.Sampling
	if t.grammar != "" {
		sp.Grammar = t.grammar
	}
	switch {
	case sp.RepeatLastN == -1:
		sp.RepeatLastN = limit // Ollama's -1: the whole context
	case sp.RepeatLastN > limit:
		// a window past the context holds no more tokens than the context;
		// the sampler allocates the window (4 bytes a token) up front, so
		// an uncapped 1e9 cost 4 GB of RSS per request
		sp.RepeatLastN = limit
	case sp.RepeatLastN < -1:
		return badField("options.repeat_last_n", "%d < -1 (-1: num_ctx, 0: 64)", sp.RepeatLastN)
	}
	t.r, t.limit, t.maxTok, t.sp = r, limit, maxTok, sp
	return nil
}

// admit leases the adapters, takes a request slot (background work: an
// idle one or none) and admits the turn's KV cells: the prompt plus the
// generation budget, at least a few tokens of it (idle slots give their
// cells back first).
func (p *Pipeline) admit(t *turn) error {
	req, l, toks := t.req, t.l, t.r.toks
	ad, err := p.adapters(t.ctx, l, req.Cube, req.Adapters)
	if err != nil {
		return err
	}
	t.ad = ad
	t.onDone(ad.release)
	t.out.Adapters = ad.key
	t.scope = convpack.SlotScope(req.Cube, t.gen, ad.key)
	if t.shared != "" {
		t.scope += "\x00" + t.shared // a slot holds state of every cube read
	}
	if t.background {
		// background work takes an idle slot or none, and gives it up to
		// the first foreground request that finds no free one
		var cancel context.CancelCauseFunc
		t.ctx, cancel = context.WithCancelCause(t.ctx)
		t.onDone(func() { cancel(nil) })
		t.sl, t.slotN, err = l.pool.AcquireBackground(toks, t.scope, cancel)
	} else {
		t.sl, t.slotN, err = l.pool.Acquire(t.ctx, toks, t.scope)
	}
	if err != nil {
		return err
	}
	sl := t.sl
	t.onDone(func() { l.pool.Release(sl) })
	l.forgetUnsaved(sl)
	got, err := l.pool.Admit(t.ctx, sl, len(toks)+min(t.maxTok, minBudget), len(toks)+t.maxTok, l.eng.NCtx(), l.res, l.clearSeq)
	if err != nil {
		if errors.Is(err, slots.ErrNoRoom) {
			return badField(request.PromptField(req), "%v (prompt %d tokens)", err, len(toks))
		}
		return err
	}
	t.maxTok = got - len(toks)
	t.slotN = l.pool.CachedAfterAdmit(sl, t.slotN) // 0 if emptied for the request first in line
	// restore and generate ahead of background work; not while waiting for
	// cells above: a tier job holding cells must be able to finish
	if !t.background {
		t.onDone(l.eng.BeginForeground())
	}
	return nil
}

// kvSource puts the longest cached prefix of the prompt into the slot's
// sequence (prepare); a failure leaves the sequence empty.
func (p *Pipeline) kvSource(t *turn) error {
	l, sl, toks := t.l, t.sl, t.r.toks
	src, err := p.prepare(t.ctx, l, sl, toks, t.slotN, t.req.Cube, t.shared, t.ad, t.req.NoCache)
	sl.SetScope(t.scope)
	if err != nil {
		l.eng.ClearSeq(sl.Seq) // whatever a failed restore or share left
		l.pool.Hold(sl, nil)
		return err
	}
	t.src = src
	p.compose(t)
	src = t.src
	l.pool.Hold(sl, toks[:src.npast]) // what the sequence holds now (cells counted by admissions)
	out := t.out
	out.CacheSource, out.PackID, out.Usage.RestoreTime = src.source, src.packID, src.restore
	if src.refused != nil {
		out.Refused = src.refused.Error()
		p.fallbacks.Add(1)
	}
	return nil
}

// decode prefills the rest of the prompt and generates, streaming text
// (tool calls held back) to Request.OnText; the slot then holds what the
// sequence holds. On an error t.out reports what was generated.
func (p *Pipeline) decode(t *turn) error {
	req, l, sl, toks, out := t.req, t.l, t.sl, t.r.toks, t.out
	onText := req.OnText
	var calls *toolcall.Filter
	if request.ToolsOn(req) && onText != nil {
		calls = toolcall.NewFilter(onText, req.ToolChoice == request.ToolRequired)
		onText = calls.OnText
	}
	var res runtime.Result
	gerr := runtime.Stream(t.ctx, onText, func(ctx context.Context, onText func(string) error) error {
		var err error
		res, err = l.eng.Generate(ctx, runtime.Request{Seq: sl.Seq, Tokens: toks, NPast: t.src.npast, Sampling: t.sp, Background: t.background,
			MaxTokens: t.maxTok, Stop: req.Stop, OnText: onText, Start: t.start, Adapters: t.ad.refs})
		return err
	})
	out.Text, out.DoneReason = res.Text, res.DoneReason
	out.Usage.CachedTokens, out.Usage.EvalTokens = res.CachedTokens, res.EvalTokens
	c := t.src.composed
	if c != nil {
		out.Usage.CachedTokens = min(res.CachedTokens, c.reused)
		out.Usage.ComposedTokens, out.Usage.RecomputedTokens = c.Tokens, c.Recomputed
	}
	out.Usage.TTFT, out.Usage.PromptDuration, out.Usage.EvalDuration = res.TTFT, res.PrefillTime, res.EvalTime
	// what the sequence holds now: a prefix of prompt + generated tokens
	all := append(slices.Clip(toks), res.Tokens...)
	t.held = l.eng.SeqLen(sl.Seq)
	if t.held > len(all) {
		l.eng.ClearSeq(sl.Seq)
		t.held = 0
	}
	out.Context = slices.Clone(all[:t.held])
	if c != nil && c.Tokens > 0 && t.held > c.Exact {
		// composed cells are not a prefill's: the slot keeps (and a
		// conversation pack stores) only the exact prefix before them
		if err := l.eng.TruncateSeq(sl.Seq, c.Exact); err != nil {
			l.eng.ClearSeq(sl.Seq)
			t.held = 0
		} else {
			t.held = c.Exact
		}
	}
	l.pool.Hold(sl, all[:t.held])
	if gerr != nil {
		return gerr
	}
	if request.ToolsOn(req) {
		if tc, ok := toolcall.Parse(out.Text); ok {
			out.ToolCalls, out.Text = tc, ""
		} else if calls != nil && calls.Held() != "" {
			// prose after all, or calls cut short: the client gets the text
			return req.OnText(calls.Held())
		}
	}
	return nil
}

// persistTurn saves a chat turn's KV state as a conversation pack in the
// background (persist), unless the request or Options say not to or the
// state is shorter than MinPersistTokens.
func (p *Pipeline) persistTurn(t *turn) {
	if t.chat && !t.req.NoPersist && !p.opts.NoPersist && t.held >= p.opts.MinPersistTokens {
		p.persist(t.l, t.sl, t.req.Cube, t.gen, t.src.prev, t.ad)
	}
	if t.chat {
		p.persistShared(t)
	}
}

// record counts the memories the prompt carried towards their heat, hands
// an answer in a cube to the OnResponse hook and an answered chat turn to
// the OnChat hook.
func (p *Pipeline) record(t *turn) {
	if t.req.Cube != "" && !t.req.NoUsage {
		p.recordUse(t.req.Cube, t.r.prompt)
	}
	p.answered(t.ctx, t.req, t.cube, t.out, t.background)
	if t.chat {
		p.chatDone(t.ctx, t.req, t.cube, t.out.Text, t.background)
	}
}

// minBudget is the fewest generated tokens a request is admitted with
// when the KV cache is short of its whole budget; it then ends with
// done_reason "length" at what it got.
const minBudget = 16

// kvSource is the KV state prepare put into a request's sequence.
type kvSource struct {
	npast   int    // prompt tokens the sequence holds
	source  string // Source*
	packID  string // stored pack restored
	prev    string // conversation pack the state continues ("" if none)
	restore time.Duration
	refused error

	composed *composed // what composition added (nil: none tried)
}

// prepare makes sl's sequence hold the longest available prefix of toks
// (at most len(toks)-1 tokens): what the slot already holds, the cube's
// resident pack's cells shared into it, or a pack of the cube restored from
// the activation tier, whichever is longest (ties: the cheapest, in that
// order). Only state of the request's own cube and adapter set is reused
// (slot.scope). With noCache the sequence is emptied.
func (p *Pipeline) prepare(ctx context.Context, l *loaded, sl *slots.Slot, toks []int32, slotN int, cube, shared string, ad adapterSet, noCache bool) (kvSource, error) {
	if noCache {
		sl.ConvPack = ""
		return kvSource{}, l.eng.ClearSeq(sl.Seq)
	}
	usable := len(toks) - 1
	slotN = min(slotN, usable)
	var rp slots.ResidentPack
	rpN := 0
	if cube != "" {
		if r, ok := l.res.Use(cube, ad.key); ok {
			rp, rpN = r, min(slots.CommonPrefix(r.Toks, toks), usable)
		}
	}
	storedN := 0
	if m := p.kv.Lookup(kvcache.ScopedKey(ad.cfgKey, cube), toks); m.ID != "" && convpack.InScope(p.kv, m.ID, cube) {
		storedN = min(m.Tokens, usable)
	}
	scope := cube
	if shared != "" {
		// the read cubes' shared pack: found only under their scope
		if m := p.kv.Lookup(kvcache.ScopedKey(ad.cfgKey, shared), toks); m.ID != "" && min(m.Tokens, usable) > storedN {
			storedN, scope = min(m.Tokens, usable), shared
		}
	}
	shareResident := func() (kvSource, error) {
		err := l.eng.ClearSeq(sl.Seq)
		if err == nil {
			err = l.eng.CopySeq(rp.Seq, sl.Seq, 0, rpN)
		}
		if err != nil {
			return kvSource{}, err
		}
		src := kvSource{npast: rpN, source: SourceResident, packID: rp.PackID}
		if info, ok := p.kv.Info(rp.PackID); ok {
			src.composed = packComposed(info.Composed, rpN)
		}
		return src, nil
	}
	switch {
	case slotN >= rpN && slotN >= storedN:
		src := kvSource{npast: slotN}
		if slotN > 0 {
			src.source = SourceSlot
			if convpack.Continues(slotN, len(sl.Toks())) {
				src.prev = sl.ConvPack
			}
		} else {
			sl.ConvPack = ""
		}
		// drop the rest now, not at the engine's admission: the cells
		// beyond the reservation are free for other requests at once
		if len(sl.Toks()) > slotN {
			if err := l.eng.TruncateSeq(sl.Seq, slotN); err != nil {
				return kvSource{}, err
			}
		}
		return src, nil
	case rpN >= storedN:
		sl.ConvPack = ""
		return shareResident()
	}
	sl.ConvPack = ""
	rs, err := p.kv.Restore(ctx, l.eng, sl.Seq, toks, kvcache.RestoreOptions{AdapterKey: ad.key, Scope: scope})
	if err != nil {
		return kvSource{}, err
	}
	if rs.Tokens > 0 {
		src := kvSource{npast: rs.Tokens, source: SourceRestored, packID: rs.PackID, restore: rs.Duration, composed: packComposed(rs.Composed, rs.Tokens)}
		if scope == cube && convpack.Continues(rs.Tokens, rs.PackTotal) {
			src.prev = rs.PackID
		}
		return src, nil
	}
	// refused (or gone meanwhile): the sequence is empty
	if rpN > 0 {
		src, err := shareResident()
		src.refused, src.restore = rs.Refused, rs.Duration
		return src, err
	}
	return kvSource{refused: rs.Refused, restore: rs.Duration}, nil
}

// persist saves sl's state as a conversation pack in the background (the
// state is copied now, so the slot is free again at once) and then drops
// prev, the pack the new state extends. When two writes are already
// running it is skipped; the slot is marked unsaved, and an unload of the
// model saves it (its next request forgets the mark).
func (p *Pipeline) persist(l *loaded, sl *slots.Slot, cube string, gen uint64, prev string, ad adapterSet) {
	cs := convSave{cube: cube, gen: gen, prev: prev, ad: adapterSet{key: ad.key, cfgKey: ad.cfgKey}}
	select {
	case p.writeSem <- struct{}{}:
	default:
		p.log.Debug("conversation pack deferred: writes busy", "seq", sl.Seq)
		l.unsavedMu.Lock()
		l.unsaved[sl] = cs
		l.unsavedMu.Unlock()
		return
	}
	store, ok := p.convState(l, sl, cs)
	if !ok {
		<-p.writeSem
		return
	}
	p.writes.Add(1)
	p.pending.Add(1)
	go func() {
		defer func() { p.pending.Add(-1); <-p.writeSem; p.writes.Done() }()
		store()
	}()
}

// persistNow stores sl's state as persist does, waiting for it (unload:
// the model is idle, nothing else uses the sequence).
func (l *loaded) persistNow(sl *slots.Slot, cs convSave) {
	p := l.p
	if len(sl.Toks()) < p.opts.MinPersistTokens {
		return // emptied for another request's room meanwhile
	}
	p.writeSem <- struct{}{}
	defer func() { <-p.writeSem }()
	if store, ok := p.convState(l, sl, cs); ok {
		store()
	}
}

// forgetUnsaved drops sl's unsaved mark: a new request uses the slot.
func (l *loaded) forgetUnsaved(sl *slots.Slot) {
	l.unsavedMu.Lock()
	delete(l.unsaved, sl)
	l.unsavedMu.Unlock()
}

// convState copies sl's state now and returns the write that stores it
// as a conversation pack; false when the state could not be read.
func (p *Pipeline) convState(l *loaded, sl *slots.Slot, cs convSave) (func(), bool) {
	cube, gen, prev, ad := cs.cube, cs.gen, cs.prev, cs.ad
	toks := slices.Clone(sl.Toks())
	snap, err := p.kv.Snapshot(l.eng, sl.Seq, kvcache.Header{AdapterKey: ad.key, Tokens: toks, Label: convpack.Label(cube), Scope: cube})
	if err != nil {
		p.log.Warn("conversation state not saved", "seq", sl.Seq, "err", err)
		return nil, false
	}
	id := kvcache.PackID(kvcache.ScopedKey(ad.cfgKey, cube), toks)
	sl.ConvPack = id
	return func() {
		start := time.Now()
		p.kvMu.Lock()
		defer p.kvMu.Unlock()
		if p.gen(cube) != gen {
			return // the cube was deleted after the request began
		}
		if convpack.Has(p.kv, id) {
			return // the same conversation state is stored already
		}
		info, err := snap.Store(context.Background())
		if err != nil {
			p.log.Warn("conversation pack not stored", "cube", cube, "err", err)
			return
		}
		if prev != "" && prev != info.ID && convpack.IsConv(p.kv, prev) {
			if err := p.kv.Delete(prev); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
				p.log.Warn("old conversation pack not deleted", "pack", prev, "err", err)
			}
		}
		p.log.Debug("conversation pack stored", "cube", cube, "pack", info.ID[:12], "n_tokens", info.NTokens,
			"blob_bytes", info.BlobBytes, "ms", time.Since(start).Milliseconds())
		p.convEvicted.Add(convpack.Trim(p.kv, p.opts.ConvBytes, info.ID, p.log))
	}, true
}

// adapterSet is a request's leased LoRA adapters and the keys KV state is
// valid under.
type adapterSet struct {
	refs   []runtime.AdapterRef
	key    string // runtime.AdapterKey(refs), "" for none
	cfgKey string // kvcache.ConfigKey of the live KV config and key
	lease  *lora.Lease
}

func (a adapterSet) release() { a.lease.Release() }

// adapters leases specs in cube (nil: the cube's defaults).
func (p *Pipeline) adapters(ctx context.Context, l *loaded, cube string, specs []lora.Spec) (adapterSet, error) {
	none := adapterSet{cfgKey: l.cfgKey}
	if !l.eng.Options().LoRA {
		if len(specs) > 0 {
			var names []string
			for _, sp := range specs {
				names = append(names, sp.Name)
			}
			return none, badField("adapters", "%s: no LoRA adapter is registered (memosrt lora add; the model was loaded without LoRA support)", strings.Join(names, ", "))
		}
		return none, nil
	}
	ls, err := l.man.Acquire(ctx, cube, specs)
	if err != nil {
		return none, err
	}
	if len(ls.Refs) == 0 {
		ls.Release()
		return none, nil
	}
	key := ls.Key()
	return adapterSet{refs: ls.Refs, key: key, cfgKey: kvcache.ConfigKey(l.eng.KVConfig(), key), lease: ls}, nil
}

// recordUse counts a turn's memories towards their heat (MemoryOS): every
// memory in the prompt is an interaction, every retrieved one also a
// visit (preferences too), and each cube's pack a visit when the prompt
// carried members of it. Each use is credited to the cube the memory lives
// in (m.Cube; a request reading several cubes). The uses are buffered and
// written off the request path (Options.UsageFlush).
func (p *Pipeline) recordUse(cube string, pk layout.Prompt) {
	uses := make([]scheduler.Use, 0, len(pk.Pack)+len(pk.Retrieved)+len(pk.Preferences)+1)
	var packs []string
	for _, m := range pk.Pack {
		c := cmp.Or(m.Cube, cube)
		uses = append(uses, scheduler.Use{Cube: c, ID: m.ID, Interactions: 1})
		if !slices.Contains(packs, c) {
			packs = append(packs, c)
		}
	}
	for _, m := range slices.Concat(pk.Retrieved, pk.Preferences) {
		uses = append(uses, scheduler.Use{Cube: cmp.Or(m.Cube, cube), ID: m.ID, Visits: 1, Interactions: 1})
	}
	for _, m := range pk.Retrieved {
		// a memory's chunk lives in its own cube's scope
		p.chunkUses.Add(cmp.Or(m.Cube, cube), []string{m.ID})
	}
	for _, c := range packs {
		uses = append(uses, scheduler.Use{Cube: c, ID: scheduler.PackUse, Visits: 1})
	}
	p.AddUses(uses)
}

// answered calls the OnResponse hook for a foreground answer in a cube.
func (p *Pipeline) answered(ctx context.Context, req *Request, cube textmem.Cube, res *Response, background bool) {
	if p.onResponse != nil && req.Cube != "" && !background {
		p.onResponse(ctx, req, cube, res)
	}
}

// chatDone calls the OnChat hook for an answered foreground chat turn.
func (p *Pipeline) chatDone(ctx context.Context, req *Request, cube textmem.Cube, answer string, background bool) {
	if p.onChat != nil && !background {
		p.onChat(ctx, req, cube, answer)
	}
}

// GenerateBackground runs req as Generate does, at background priority
// (an extraction job): it takes only an idle slot (slots.ErrNoIdle when
// there is none), gives it up to the first foreground request that finds
// none free, yields batch room to foreground requests and calls no
// OnChat hook. Errors as Generate.
func (p *Pipeline) GenerateBackground(ctx context.Context, req Request) (*Response, error) {
	return p.do(ctx, &req, false, true)
}

// ContextTokens is the primary's n_ctx while the tier scheduler uses it,
// else 0.
func (p *Pipeline) ContextTokens() int {
	if l := p.jobL.Load(); l != nil {
		return l.eng.NCtx()
	}
	return 0
}
