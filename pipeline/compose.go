package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// Composition (docs/design.md, Composition): a memory retrieved often gets
// its own KV chunk, its bullet line's tokens (layout.Layout.LineTokens)
// prefilled after the model's BOS alone and stored as a pack labelled
// "chunk:<cube>:<memory id>" in the scope chunkScope(cube). Its id is a
// content address (kvcache.PackID over the KV config with the model's
// fingerprint, the scope and the tokens), so an edited memory's old chunk
// is never found; a tick deletes chunks whose memory is gone or changed.
// The KV source stage (kvSource) composes the leading run of the last
// turn's retrieved memories that have chunks after the reused prefix
// (runtime.Engine.ComposeSeq with a Held preamble); the rest of the prompt
// is prefilled.

// composeScratch is how many scratch sequences a composing model holds:
// recomputed runs of a composition share one llama_decode per this many
// (runtime.Engine.ComposeSeq's waves; each decode streams every weight).
const composeScratch = 16

// chunkPrefix starts the label of every memory chunk.
const chunkPrefix = "chunk:"

// chunkLabel is the label of the chunks of memory id in cube.
func chunkLabel(cube, id string) string { return chunkPrefix + cube + ":" + id }

// chunkScope is the kvcache scope of cube's chunks: never found by the
// cube's prefix lookups (a chunk is not a prompt prefix).
func chunkScope(cube string) string { return cube + "\x00chunk" }

// ChunkOf splits a memory chunk's label into its cube and memory id; ok is
// false for any other pack.
func ChunkOf(label string) (cube, id string, ok bool) {
	rest, ok := strings.CutPrefix(label, chunkPrefix)
	if !ok {
		return "", "", false
	}
	cube, id, ok = strings.Cut(rest, ":")
	return cube, id, ok
}

// chunkID is the pack id of the chunk of a memory whose line has toks,
// under cfgKey (kvcache.ConfigKey of the KV config and adapter set).
func chunkID(cfgKey, cube string, toks []int32) string {
	return kvcache.PackID(kvcache.ScopedKey(cfgKey, chunkScope(cube)), toks)
}

// composeRatio decides l's recompute fraction at load: Options.Compose,
// or what the ComposeRatio hook says for the model; 0 (off) under a
// runtime.Engine.ShiftGuard (the model's KV cells may not be moved: exact
// prefill always).
func (p *Pipeline) composeRatio(l *loaded) float64 {
	r := p.opts.Compose
	if p.opts.ComposeRatio != nil {
		if v, ok := p.opts.ComposeRatio(l.cfgKey); ok {
			r = v
		}
	}
	r = min(max(r, 0), 1)
	if err := l.eng.ShiftGuard(); err != nil && r > 0 {
		p.log.Info("composition off for the model: exact prefill", "model", l.info.Name, "reason", err)
		return 0
	}
	if r > 0 {
		p.log.Info("composition on", "model", l.info.Name, "recompute_fraction", r)
	}
	return r
}

// preambleLocked returns the chunks' shared preamble (the model's BOS),
// prefilling it on first use. Caller holds l.composeMu.
func (l *loaded) preambleLocked(ctx context.Context) (runtime.Preamble, error) {
	if len(l.chunkPre.Tokens) > 0 {
		return l.chunkPre, nil
	}
	pre, err := l.eng.PrefillPreamble(ctx, l.scratch[0], []runtime.Token{l.eng.BOS()})
	if err != nil {
		return pre, err
	}
	l.chunkPre = pre
	return pre, nil
}

// ChunkResult reports MakeChunks.
type ChunkResult struct {
	Made    int `json:"made"`    // chunks computed and stored now
	Present int `json:"present"` // chunks stored already (the memory unchanged)
}

// MakeChunks computes and stores the KV chunks of cube's memories ids
// (all of the cube's memories but recorded chat turns when ids is empty)
// with the primary model, waiting for each (the request path composes
// them from then on). Errors: *FieldError when composition is off
// (Options.Compose, or a guarded model), textmem.ErrUnknownCube,
// textmem.ErrNotFound for an id, ErrBusy while a composition or another
// chunk holds the scratch sequence, engine and storage errors.
func (p *Pipeline) MakeChunks(ctx context.Context, cube string, ids []string) (ChunkResult, error) {
	var res ChunkResult
	l, release, err := p.use(ctx, "", nil)
	if err != nil {
		return res, err
	}
	defer release()
	if l.ratio <= 0 {
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
		// cube's memories to compute ahead (retrieval brings moved turns
		// in by heat: ticks make theirs)
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
	for _, m := range mems {
		made, err := p.makeChunk(ctx, l, cube, m, true)
		if err != nil {
			return res, err
		}
		if made {
			res.Made++
		} else {
			res.Present++
		}
	}
	return res, nil
}

// makeChunk stores memory m's chunk unless it is stored already (made
// false). wait (MakeChunks): wait for the scratch sequence and prefill at
// foreground priority; else (a tick) ErrBusy at once and background
// priority.
// The chunk's cells are reserved like a tier job's (ErrBusy when none are
// free).
func (p *Pipeline) makeChunk(ctx context.Context, l *loaded, cube string, m textmem.Memory, wait bool) (bool, error) {
	toks, err := l.lay.LineTokens(m)
	if err != nil || len(toks) == 0 {
		return false, err
	}
	id := chunkID(l.cfgKey, cube, toks)
	if p.hasPack(id) {
		return false, nil
	}
	if wait {
		l.composeMu.Lock()
	} else if !l.composeMu.TryLock() {
		return false, fmt.Errorf("%w: the composition sequence is in use", ErrBusy)
	}
	defer l.composeMu.Unlock()
	unreserve, err := l.pool.ReserveNow(l.chunkSlot, len(toks)+1, l.eng.NCtx(), l.res, l.clearSeq)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	defer unreserve()
	pre, err := l.preambleLocked(ctx)
	if err != nil {
		return false, err
	}
	start := time.Now()
	c, err := l.eng.PrefillChunkAt(ctx, l.scratch[0], pre, toks, !wait)
	if err != nil {
		return false, err
	}
	gen := p.gen(cube)
	p.kvMu.Lock()
	defer p.kvMu.Unlock()
	if p.gen(cube) != gen {
		return false, nil
	}
	info, err := p.kv.Put(ctx, kvcache.Header{KV: l.eng.KVConfig(), Tokens: toks, NCtxNeeded: c.Pos0 + len(toks),
		Label: chunkLabel(cube, m.ID), Scope: chunkScope(cube)}, c.State)
	if err != nil {
		return false, err
	}
	p.log.Debug("memory chunk stored", "cube", cube, "memory", m.ID, "pack", info.ID[:12], "n_tokens", len(toks),
		"ms", time.Since(start).Milliseconds())
	return true, nil
}

// composed is what kvSource's composition placed into a turn's sequence.
type composed struct {
	reused     int // prompt tokens prepare reused (cached_tokens)
	exact      int // prompt tokens the sequence holds exactly: the reused prefix and what was prefilled up to the chunks
	tokens     int // chunk tokens placed (composed_tokens)
	recomputed int // of them, decoded again
	memories   []string
}

// compose extends t's KV source (src: the exact prefix prepare put into
// the slot's sequence) with the chunks of the last turn's retrieved
// memories: when the prefix ends at or before the retrieved block and the
// block's first memories have chunks, the tokens up to the block are
// prefilled, the leading run of chunked memories is composed after them
// (runtime.Engine.ComposeSeq, Held preamble, Ratio l.ratio) and src.npast
// moves past it. Nothing happens with composition off, a busy scratch
// sequence, adapters, NoCache, no chunk or no free cells for the probe
// (as many as the chunk tokens, reserved while it runs); a failed
// composition leaves the exact prefix and is logged (the turn prefills
// the rest).
func (p *Pipeline) compose(t *turn) {
	l, sl, toks, src := t.l, t.sl, t.r.toks, &t.src
	pk := t.r.prompt
	if l.ratio <= 0 || t.req.Cube == "" || t.req.NoCache || t.ad.key != "" || len(pk.RetrievedSpans) == 0 {
		return
	}
	first := pk.RetrievedSpans[0].Start
	if src.npast > first {
		return
	}
	var chunks []runtime.Chunk
	var ids []string
	end := first
	for i, sp := range pk.RetrievedSpans {
		if sp.Start != end || sp.End >= len(toks) {
			break
		}
		id := chunkID(l.cfgKey, t.req.Cube, toks[sp.Start:sp.End])
		h, state, _, err := p.kv.State(id)
		if err != nil {
			break
		}
		chunks = append(chunks, runtime.Chunk{Tokens: h.Tokens, Pos0: 1, State: state})
		ids = append(ids, pk.Retrieved[i].ID)
		end = sp.End
	}
	if len(chunks) == 0 || !l.composeMu.TryLock() {
		return
	}
	defer l.composeMu.Unlock()
	// the probe decodes the chunk tokens once more in a scratch sequence:
	// their cells are reserved beside the turn's, or the turn prefills
	unreserve, err := l.pool.ReserveNow(l.chunkSlot, end-first, l.eng.NCtx(), l.res, l.clearSeq)
	if err != nil {
		p.log.Debug("composition skipped: no cells for its probe", "cube", t.req.Cube, "cells", end-first, "err", err)
		return
	}
	defer unreserve()
	ctx := t.ctx
	if src.npast < first {
		_, err := l.eng.Generate(ctx, runtime.Request{Seq: sl.Seq, Tokens: toks[:first], NPast: src.npast, PrefillOnly: true,
			Background: t.req.background})
		if err != nil {
			p.log.Warn("composition: prefill before the chunks failed", "err", err)
			return
		}
	}
	c := composed{reused: src.npast, exact: first}
	res, err := l.eng.ComposeSeq(ctx, sl.Seq, l.scratch, runtime.Preamble{Tokens: toks[:first], Held: true}, chunks,
		runtime.ComposeOptions{Ratio: l.ratio})
	if err != nil {
		p.log.Warn("composition failed: the turn prefills its memories", "cube", t.req.Cube, "err", err)
		p.composeFailed.Add(1)
		src.composed = &c
		src.npast = first
		return
	}
	c.tokens, c.recomputed, c.memories = res.ChunkTokens, res.Recomputed, ids
	src.composed = &c
	src.npast = first + res.ChunkTokens
	p.log.Debug("composed", "cube", t.req.Cube, "memories", len(ids), "composed_tokens", c.tokens, "recomputed_tokens", c.recomputed,
		"probe_ms", res.ProbeTime.Milliseconds(), "recompute_ms", res.RecomputeTime.Milliseconds())
}

// chunkCounter counts retrievals per memory towards its chunk
// (Options.ChunkAfterUses); safe for concurrent use.
type chunkCounter struct {
	mu sync.Mutex
	n  map[[2]string]int // (cube, memory id) → retrievals since load or since its chunk was made
}

// add counts one retrieval of each of ids in cube.
func (c *chunkCounter) add(cube string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[[2]string]int{}
	}
	for _, id := range ids {
		c.n[[2]string{cube, id}]++
	}
}

// take returns the memories retrieved at least k times and forgets them.
func (c *chunkCounter) take(k int) [][2]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][2]string
	for key, n := range c.n {
		if n >= k {
			out = append(out, key)
			delete(c.n, key)
		}
	}
	return out
}

// tickChunks is the chunk part of a tick (with the primary loaded and
// composition on): it deletes chunks whose memory is gone or changed, then
// computes the chunks of memories retrieved ChunkAfterUses times, at
// background priority (a busy scratch sequence or no free cells: the
// memory waits for its next retrievals), while the KV tier's byte budget
// (scheduler.Tiers.KVUse) has room.
func (p *Pipeline) tickChunks(ctx context.Context, l *loaded) error {
	if l.ratio <= 0 {
		return nil
	}
	if err := p.sweepChunks(ctx, l); err != nil {
		return err
	}
	for _, key := range p.chunkUses.take(p.opts.ChunkAfterUses) {
		used, budget, err := p.tiers.KVUse()
		if err != nil {
			return err
		}
		for _, pk := range p.kv.List("") {
			if _, _, ok := ChunkOf(pk.Label); ok {
				used += pk.RawBytes // chunks count as the tier's packs do
			}
		}
		if budget > 0 && used >= budget {
			p.log.Debug("memory chunk not made: KV tier budget full", "cube", key[0], "memory", key[1])
			return nil
		}
		m, err := p.mem.Get(ctx, key[0], key[1])
		if errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrUnknownCube) {
			continue
		}
		if err != nil {
			return err
		}
		if _, err := p.makeChunk(ctx, l, key[0], m, false); err != nil && !errors.Is(err, ErrBusy) {
			return err
		}
	}
	return nil
}

// sweepChunks deletes the stored chunks of memories deleted since, or
// whose text (so their line's tokens) changed.
func (p *Pipeline) sweepChunks(ctx context.Context, l *loaded) error {
	for _, pk := range p.kv.List("") {
		cube, id, ok := ChunkOf(pk.Label)
		if !ok {
			continue
		}
		stale := false
		m, err := p.mem.Get(ctx, cube, id)
		switch {
		case errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrUnknownCube):
			stale = true
		case err != nil:
			return err
		default:
			toks, err := l.lay.LineTokens(m)
			if err != nil {
				return err
			}
			stale = chunkID(kvcache.ConfigKey(l.eng.KVConfig(), pk.AdapterKey), cube, toks) != pk.ID
		}
		if !stale {
			continue
		}
		p.kvMu.Lock()
		err = p.kv.Delete(pk.ID)
		p.kvMu.Unlock()
		if err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			return err
		}
		p.log.Debug("stale memory chunk deleted", "cube", cube, "memory", id, "pack", pk.ID[:12])
	}
	return nil
}
