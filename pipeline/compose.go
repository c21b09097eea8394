package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/kvcache"
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
	src.composed = &composed{reused: src.npast, Composed: c}
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
