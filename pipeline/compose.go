package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/memchunk"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/textmem"
)

// Composition (docs/design.md, Composition; package memchunk): memories
// retrieved often get their own KV chunk, and the KV source stage composes
// the leading run of the last turn's retrieved memories that have chunks
// after the reused prefix; the rest of the prompt is prefilled.

// ChunkOf splits a memory chunk's label into its cube and memory id; ok is
// false for any other pack (memchunk.Of).
func ChunkOf(label string) (cube, id string, ok bool) { return memchunk.Of(label) }

// composeRatio decides l's recompute fraction at load (memchunk.Decide:
// Options.Compose or the ComposeRatio hook; off under a ShiftGuard).
func (p *Pipeline) composeRatio(l *loaded) float64 {
	guard := l.eng.ShiftGuard()
	if p.opts.ComposeAuto {
		if guard != nil {
			p.log.Info("composition off for the model: exact prefill", "model", l.info.Name, "reason", guard)
		}
		return 0 // the calibration gate decides per turn (compose)
	}
	r := memchunk.Decide(p.opts.Compose, p.opts.ComposeRatio, l.cfgKey, guard)
	if guard != nil && (p.opts.Compose > 0 || p.opts.ComposeRatio != nil) {
		p.log.Info("composition off for the model: exact prefill", "model", l.info.Name, "reason", guard)
	} else if r > 0 {
		p.log.Info("composition on", "model", l.info.Name, "recompute_fraction", r)
	}
	return r
}

// reserveChunk returns l's reservation of n KV cells for chunk work (a
// chunk's prefill, a composition's probe), taken now or not at all.
func (l *loaded) reserveChunk(n int) (func(), error) {
	return l.pool.ReserveNow(l.chunkSlot, n, l.eng.NCtx(), l.res, l.clearSeq)
}

// ChunkResult reports MakeChunks.
type ChunkResult = memchunk.Result

// MakeChunks computes and stores the KV chunks of cube's memories ids
// (all of the cube's memories but recorded chat turns when ids is empty)
// with the primary model, waiting for each (the request path composes
// them from then on). Errors: *FieldError when composition is off
// (Options.Compose, or a guarded model), textmem.ErrUnknownCube,
// textmem.ErrNotFound for an id, ErrBusy when the KV cells are short,
// engine and storage errors.
func (p *Pipeline) MakeChunks(ctx context.Context, cube string, ids []string) (ChunkResult, error) {
	var res ChunkResult
	l, release, err := p.use(ctx, "", nil)
	if err != nil {
		return res, err
	}
	defer release()
	if l.chunks == nil {
		return res, badField("cube", "composition is off (serve --compose, Options.Compose; or the model's KV cells may not be shifted)")
	}
	if err := p.CheckCube(ctx, cube); err != nil {
		return res, err
	}
	var mems []textmem.Memory
	if len(ids) == 0 {
		if mems, err = p.mem.List(ctx, cube); err != nil {
			return res, err
		}
		// as Warm: recorded chat turns and hidden sources are not the
		// cube's memories to compute ahead (ticks make moved turns'
		// chunks by their retrievals)
		mems = slices.DeleteFunc(mems, func(m textmem.Memory) bool {
			return m.Kind == conversation.KindTurn || slices.Contains(p.opts.Layout.HideSources, m.Source)
		})
	} else {
		for _, id := range ids {
			m, err := p.mem.Get(ctx, cube, id)
			if err != nil {
				return res, err
			}
			mems = append(mems, m)
		}
	}
	res, err = l.chunks.MakeAll(ctx, cube, mems, l.reserveChunk, p.storeChunk(ctx, cube))
	if errors.Is(err, slots.ErrNoRoom) {
		err = fmt.Errorf("%w: %w", ErrBusy, err)
	}
	return res, err
}

// storeChunk returns memchunk's store for cube: a kvcache Put under
// kvMu, declined once the cube was deleted after this call.
func (p *Pipeline) storeChunk(ctx context.Context, cube string) func(kvcache.Header, []byte) error {
	gen := p.gen(cube)
	return func(h kvcache.Header, state []byte) error {
		p.kvMu.Lock()
		defer p.kvMu.Unlock()
		if p.gen(cube) != gen {
			return nil
		}
		_, err := p.kv.Put(ctx, h, state)
		return err
	}
}

// composed is what kvSource's composition placed into a turn's sequence.
type composed struct {
	reused int // prompt tokens prepare reused (cached_tokens)
	memchunk.Composed
}

// compose extends t's KV source (src: the exact prefix prepare put into
// the slot's sequence) with the chunks of the last turn's retrieved
// memories (memchunk.Composer.Plan and Compose) and moves src.npast past
// them. Nothing happens with composition off, adapters, NoCache, no chunk,
// busy scratch sequences or no free cells for the probe; a failed
// composition leaves the exact prefix and is logged (the turn prefills
// the rest).
func (p *Pipeline) compose(t *turn) {
	l, src, pk := t.l, &t.src, t.r.prompt
	if l.chunks == nil || t.req.Cube == "" || t.req.NoCache || t.ad.key != "" {
		return
	}
	ids, cubes := make([]string, len(pk.Retrieved)), make([]string, len(pk.Retrieved))
	for i, m := range pk.Retrieved {
		ids[i], cubes[i] = m.ID, cmp.Or(m.Cube, t.req.Cube)
	}
	plan, ok := l.chunks.Plan(cubes, t.r.toks, src.npast, pk.RetrievedSpans, ids)
	if !ok {
		return
	}
	if l.gateKey != "" {
		// Options.ComposeAuto: exact until the gate has decided (its
		// calibration starts now, in the background), then its fraction
		// (0: shift only) or nothing when it turned composition off
		r, decided := p.gate.ComposeRatio(l.gateKey)
		if !decided {
			p.gate.Start(l.gateKey, l.eng)
			return
		}
		if plan.Ratio = r; r == 0 {
			plan.Ratio = -1
		}
	}
	c, ok, err := l.chunks.Compose(t.ctx, t.sl.Seq, t.r.toks, src.npast, plan, t.background, l.reserveChunk)
	if !ok {
		return
	}
	prev := src.composed // a composed pack's cells before the block
	src.composed = &composed{reused: src.npast, Composed: c}
	if prev != nil {
		src.composed.reused, src.composed.Exact = prev.reused, prev.Exact
		src.composed.Tokens += prev.Tokens
		src.composed.Recomputed += prev.Recomputed
	}
	src.npast = c.Exact + c.Tokens
	if err != nil {
		p.log.Warn("composition failed: the turn prefills its memories", "cube", t.req.Cube, "err", err)
		return
	}
	p.log.Debug("composed", "cube", t.req.Cube, "memories", len(plan.IDs), "composed_tokens", c.Tokens, "recomputed_tokens", c.Recomputed,
		"probe_ms", c.Result.ProbeTime.Milliseconds(), "recompute_ms", c.Result.RecomputeTime.Milliseconds())
}

// tickChunks is the chunk part of a tick (composition on,
// memchunk.Composer.Tick): stale chunks deleted, chunks made for the
// memories retrieved ChunkAfterUses times while the KV tier's byte budget
// (scheduler.Tiers.KVUse, chunks counted) has room.
func (p *Pipeline) tickChunks(ctx context.Context, l *loaded) error {
	if l.chunks == nil {
		return nil
	}
	room := func(chunkBytes int64) (bool, error) {
		used, budget, err := p.tiers.KVUse()
		return budget <= 0 || used+chunkBytes < budget, err
	}
	del := func(id string) error {
		p.kvMu.Lock()
		defer p.kvMu.Unlock()
		return p.kv.Delete(id)
	}
	return l.chunks.Tick(ctx, p.mem, &p.chunkUses, p.opts.ChunkAfterUses, room, l.reserveChunk, p.storeChunkAny(ctx), del)
}

// storeChunkAny is storeChunk for chunks of any cube (a tick's).
func (p *Pipeline) storeChunkAny(ctx context.Context) func(kvcache.Header, []byte) error {
	return func(h kvcache.Header, state []byte) error {
		cube, _, _ := memchunk.Of(h.Label)
		return p.storeChunk(ctx, cube)(h, state)
	}
}

// packComposed is what a turn reusing n tokens of a composed pack (pc:
// its kvcache.Composition; nil for a prefill's) holds of it: the composed
// tokens among the n, reported as composed_tokens with the pack's
// recomputed ones, the rest as cached; after the turn the slot keeps only
// the exact part before them, as after a composed turn. Nil when the n
// tokens end before the composed ones.
func packComposed(pc *kvcache.Composition, n int) *composed {
	if pc == nil || n <= pc.First {
		return nil
	}
	within := min(n, pc.First+pc.Tokens) - pc.First
	return &composed{reused: n - within, Composed: memchunk.Composed{Exact: pc.First, Tokens: within, Recomputed: pc.Recomputed}}
}

// composePack is TierOptions.Compose, set with Options.ComposeAuto: a
// background tier job's pack of toks (members mems, pack order; the job's
// sequence seq holds toks[:npast] exactly) composes the leading run of
// its members after npast that have chunks (memchunk.Composer.Plan and
// Compose, as a turn's KV source does) at the gate's fraction, once the
// gate has decided that the model may compose. It returns nil and npast,
// the job then prefilling as before, when the gate has not decided or
// refused, the members' lines are not found token for token in toks
// (the pack's text tokenized across a line boundary), the first member
// after npast has no chunk, the scratch sequences or the probe's cells
// are busy, or the composition failed (logged; seq holds its exact part).
func (p *Pipeline) composePack(ctx context.Context, cube string, mems []textmem.Memory, toks []int32, seq, npast int) (*kvcache.Composition, int, error) {
	l := p.jobL.Load()
	if l == nil || l.chunks == nil || l.gateKey == "" {
		return nil, npast, nil
	}
	r, ok := p.gate.ComposeRatio(l.gateKey)
	if !ok {
		return nil, npast, nil
	}
	return p.composePackAt(ctx, l, r, cube, mems, toks, seq, npast)
}

// composePackAt is composePack on l at the recompute fraction r (0: shift
// only), whatever the gate says.
func (p *Pipeline) composePackAt(ctx context.Context, l *loaded, r float64, cube string, mems []textmem.Memory, toks []int32, seq, npast int) (*kvcache.Composition, int, error) {
	spans, err := memberSpans(l.lay, mems, toks)
	if err != nil || spans == nil {
		return nil, npast, err
	}
	var ids, cubes []string
	var after []layout.Span
	for i, sp := range spans {
		if sp.Start >= npast {
			after = append(after, sp)
			ids, cubes = append(ids, mems[i].ID), append(cubes, cube)
		}
	}
	// the extra token: Plan keeps a prompt's last token for the decode, a
	// pack needs no logits
	plan, ok := l.chunks.Plan(cubes, append(slices.Clone(toks), 0), npast, after, ids)
	if !ok {
		return nil, npast, nil
	}
	if plan.Ratio = r; r == 0 {
		plan.Ratio = -1
	}
	c, ok, err := l.chunks.Compose(ctx, seq, toks, npast, plan, true, l.reserveChunk)
	if !ok {
		return nil, npast, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		p.log.Warn("pack composition failed: the job prefills its members", "cube", cube, "err", err)
		return nil, c.Exact, nil
	}
	held := c.Exact + c.Tokens
	if c.Recomputed == 0 && held == len(toks) {
		// shifted K cells are rotated at the next decode (ComposeSeq):
		// leave the last token to the job's prefill, which runs one,
		// before the state is saved
		if err := l.eng.TruncateSeq(seq, held-1); err != nil {
			return nil, 0, err
		}
		held--
		if c.Tokens--; c.Tokens == 0 {
			return nil, held, nil
		}
	}
	p.composedPacks.Add(1)
	p.log.Debug("pack composed", "cube", cube, "memories", len(plan.IDs), "composed_tokens", c.Tokens, "recomputed_tokens", c.Recomputed)
	return &kvcache.Composition{First: c.Exact, Tokens: c.Tokens, Recomputed: c.Recomputed, Ratio: r}, held, nil
}

// memberSpans returns where each of mems' bullet lines (layout.Layout.LineTokens)
// sits in a pack's tokens toks: the lines' concatenation found once,
// last occurrence, as the pack text holds them one after another; nil
// when it is not there (the pack's text was tokenized across a line
// boundary: its members cannot be composed). Errors: the tokenizer's.
func memberSpans(lay *layout.Layout, mems []textmem.Memory, toks []int32) ([]layout.Span, error) {
	var all []int32
	ends := make([]int, len(mems))
	for i, m := range mems {
		t, err := lay.LineTokens(m)
		if err != nil {
			return nil, err
		}
		all = append(all, t...)
		ends[i] = len(all)
	}
	if len(all) == 0 {
		return nil, nil
	}
	for at := len(toks) - len(all); at >= 0; at-- {
		if slices.Equal(toks[at:at+len(all)], all) {
			spans := make([]layout.Span, len(mems))
			start := at
			for i, e := range ends {
				spans[i] = layout.Span{Start: start, End: at + e}
				start = at + e
			}
			return spans, nil
		}
	}
	return nil, nil
}
