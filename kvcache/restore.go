package kvcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/memosrt/memosrt/runtime"
)

// Restored reports a prefix restore.
type Restored struct {
	PackID    string        `json:"pack_id,omitempty"`
	Tokens    int           `json:"tokens"`   // prompt tokens now held by the sequence (usable prefix)
	FromRAM   bool          `json:"from_ram"` // state came from the RAM cache, not Badger
	Duration  time.Duration `json:"-"`
	Refused   error         `json:"-"` // non-nil when a pack matched but was refused (and dropped)
	PackTotal int           `json:"pack_tokens"`
	// Composed is the restored pack's Header.Composed: nil for a
	// prefill's state (or with RestoreOptions.ExactOnly, which restores
	// only a composed pack's exact part).
	Composed *Composition `json:"composed,omitempty"`
}

// Restore finds the longest cached prefix of toks for the engine's live KV
// config and adapterKey, restores it into seq and truncates seq to the usable
// prefix: at most len(toks)-1 tokens, so the caller always decodes the last
// prompt token (a restored state has no logits). On a miss seq is emptied.
// A pack that cannot be restored is reported in Restored.Refused, seq is
// then empty and the caller prefills normally; the pack is deleted only when
// the failure proves its bytes bad (Proven), else kept (no free cells, a read
// error). The returned error is non-nil only for ctx or engine failures.
// RestoreOptions select which packs a restore may use.
type RestoreOptions struct {
	AdapterKey string // runtime.AdapterKey of the request's adapters ("" = none)
	Scope      string // isolation domain, the cube ("" = unscoped packs only)
	// ExactOnly restores of a composed pack (Header.Composed) only its
	// exact part, the positions before its composed tokens: the caller
	// builds an exact state on it.
	ExactOnly bool
}

func (c *Cache) Restore(ctx context.Context, eng *runtime.Engine, seq int, toks []int32, o RestoreOptions) (Restored, error) {
	adapterKey := o.AdapterKey
	start := time.Now()
	var r Restored
	if err := ctx.Err(); err != nil {
		return r, err
	}
	live := eng.KVConfig()
	m := c.Lookup(ScopedKey(ConfigKey(live, adapterKey), o.Scope), toks)
	usable := min(m.Tokens, len(toks)-1)
	if m.ID == "" || usable <= 0 {
		err := eng.ClearSeq(seq)
		r.Duration = time.Since(start)
		return r, err
	}
	h, state, fromRAM, release, err := c.restoreState(m.ID)
	defer release() // after RestoreSeq: llama.cpp has copied the state
	if errors.Is(err, ErrNotFound) {
		// deleted meanwhile, or a shared pack whose blob was evicted: a miss
		err := eng.ClearSeq(seq)
		r.Duration = time.Since(start)
		return r, err
	}
	if err == nil {
		err = h.Check(live, adapterKey)
	}
	if err == nil && o.ExactOnly && h.Composed != nil && h.Composed.First < usable {
		if usable = h.Composed.First; usable <= 0 {
			err := eng.ClearSeq(seq)
			r.Duration = time.Since(start)
			return r, err
		}
	}
	if err == nil && h.NTokens > usable {
		// restore only the cells used: no transient use of the rest
		state, err = runtime.TruncateSeqState(state, usable)
	}
	if err == nil {
		_, err = eng.RestoreSeq(seq, state)
	}
	if err == nil {
		// the sequence must hold exactly the usable prefix: never report
		// cached tokens that would in fact be prefilled again
		if got := eng.SeqLen(seq); got != usable {
			err = fmt.Errorf("%w: sequence holds %d positions after restoring %d", runtime.ErrRestoreFailed, got, usable)
		}
	}
	if err != nil {
		if errors.Is(err, runtime.ErrClosed) {
			return r, err
		}
		if cerr := eng.ClearSeq(seq); cerr != nil {
			return r, cerr
		}
		if Proven(err) {
			c.log.Warn("kvcache: pack refused and deleted; falling back to prefill", "pack", m.ID[:12], "err", err)
			if errors.Is(err, ErrCorrupt) {
				c.damaged.Add(1)
			}
			c.Delete(m.ID)
		} else {
			c.log.Info("kvcache: pack not restored (kept); falling back to prefill", "pack", m.ID[:12], "err", err)
		}
		r.Refused = err
		r.Duration = time.Since(start)
		return r, nil
	}
	r = Restored{PackID: m.ID, Tokens: usable, FromRAM: fromRAM, Duration: time.Since(start), PackTotal: h.NTokens}
	if h.Composed != nil && usable > h.Composed.First {
		r.Composed = h.Composed
	}
	return r, nil
}

// Proven reports whether err proves a pack's bytes bad, so that it may be
// deleted: a failed checksum, framing or header (ErrCorrupt, ErrVersion), a
// header for another KV config (ErrMismatch), a state that does not parse
// or fit the live layout (runtime.ErrBadState). A read error, no room in
// the KV cache (runtime.ErrRestoreFailed) or a busy sequence proves
// nothing: the pack is kept.
func Proven(err error) bool {
	return errors.Is(err, ErrCorrupt) || errors.Is(err, ErrVersion) || errors.Is(err, ErrMismatch) ||
		errors.Is(err, runtime.ErrBadState) || errors.Is(err, ErrTooLarge)
}

// WarmOptions tune Warm and Compute.
type WarmOptions struct {
	Adapters   []runtime.AdapterRef // LoRA set the state is computed under
	Label      string               // e.g. the cube
	Scope      string               // isolation domain (Header.Scope), the cube; "" = unscoped
	Background bool                 // prefill at background priority (runtime.Request.Background)
	// Chunk, with Background, bounds each background prefill request, in
	// tokens, so that a foreground request waits for at most one such
	// batch; 0: one request.
	Chunk int
	// Lossy, when set, stores the pack quantized with it (Header.Lossy):
	// the caller sets it only where the calibration gate (package kvgate)
	// allows that codec for the model. Nil: exact.
	Lossy *LossyParams
	// Compose, when set, is a hook, a KV source after the restore: given seq
	// holding toks[:npast] (an exact state: Compute restores only exact
	// prefixes), it may place more of toks by composing KV chunks
	// (runtime.Engine.ComposeSeq) and returns what it did (nil: nothing)
	// and the tokens seq holds now; Compute prefills the rest and stores
	// the pack with Header.Composed set. The caller sets it only where
	// the calibration gate (package kvgate) allows composition for the
	// model. An error fails the Compute. Nil: a prefill.
	Compose func(ctx context.Context, seq, npast int) (c *Composition, held int, err error)
}

// Warm is Compute without the count of decoded tokens.
func (c *Cache) Warm(ctx context.Context, eng *runtime.Engine, seq int, toks []int32, o WarmOptions) (Info, error) {
	info, _, err := c.Compute(ctx, eng, seq, toks, o)
	return info, err
}

// Compute makes the pack of toks, the one "KV source → prefill → save →
// store" routine of the activation tier: the longest stored prefix of toks
// (toks itself included) is restored into seq, which is emptied first; the
// rest is composed (o.Compose) and prefilled under o.Adapters; the state
// is saved and stored as a pack (Put), labelled and scoped by o. seq holds
// toks afterwards. A composed pack lends only its exact part as prefix.
// decoded is the tokens decoded: those prefilled and those a composition
// recomputed (0 when the whole pack was stored).
// Errors: no tokens, the engine's (ctx's, ErrClosed, ErrSeqBusy while
// another request uses seq), Put's.
func (c *Cache) Compute(ctx context.Context, eng *runtime.Engine, seq int, toks []int32, o WarmOptions) (info Info, decoded int, err error) {
	if len(toks) == 0 {
		return Info{}, 0, fmt.Errorf("kvcache: warm: no tokens")
	}
	adapterKey := runtime.AdapterKey(o.Adapters)
	// the extra token lets Restore take all of toks (it keeps at least one
	// token of a request for the decode); a composed pack lends only its
	// exact part, so a prefill never builds on composed cells
	rs, err := c.Restore(ctx, eng, seq, append(slices.Clone(toks), 0), RestoreOptions{AdapterKey: adapterKey, Scope: o.Scope, ExactOnly: true})
	if err != nil {
		return Info{}, 0, err
	}
	if rs.Tokens == len(toks) && rs.PackTotal == len(toks) {
		// the pack itself was restored
		c.mu.Lock()
		rec := c.packs[rs.PackID]
		if rec != nil {
			info = c.info(rec)
		}
		c.mu.Unlock()
		if rec != nil {
			return info, 0, nil
		}
		// deleted meanwhile: its state is stored again below
	}
	npast := rs.Tokens
	var comp *Composition
	if o.Compose != nil && npast < len(toks) {
		if comp, npast, err = o.Compose(ctx, seq, npast); err != nil {
			return Info{}, 0, err
		}
		if npast < rs.Tokens || npast > len(toks) {
			return Info{}, 0, fmt.Errorf("kvcache: warm: composition left %d tokens of %d (restored %d)", npast, len(toks), rs.Tokens)
		}
		if comp != nil && comp.Tokens == 0 {
			comp = nil
		}
	}
	if err := prefillChunks(ctx, eng, seq, toks, npast, o); err != nil {
		return Info{}, 0, err
	}
	snap, err := c.Snapshot(eng, seq, Header{AdapterKey: adapterKey, Tokens: toks, Label: o.Label, Scope: o.Scope, Lossy: o.Lossy, Composed: comp})
	if err != nil {
		return Info{}, 0, err
	}
	info, err = snap.Store(ctx)
	decoded = len(toks) - npast
	if comp != nil {
		decoded += comp.Recomputed
	}
	return info, decoded, err
}

// Snapshot is a sequence's KV state copied out of the engine, to be stored
// as a pack later (Store): the sequence is free again as soon as Snapshot
// returns. Chat turns (their conversation packs, stored in the
// background) and Compute save state through it.
type Snapshot struct {
	c     *Cache
	h     Header
	state []byte
}

// Snapshot copies seq's state now, under h (h.KV is set to the engine's
// live KV config; h.Tokens must be the tokens seq holds). Errors: the
// engine's (ErrClosed, a busy or empty sequence).
func (c *Cache) Snapshot(eng *runtime.Engine, seq int, h Header) (Snapshot, error) {
	state, err := eng.SaveSeq(seq)
	if err != nil {
		return Snapshot{}, err
	}
	h.KV = eng.KVConfig()
	return Snapshot{c: c, h: h, state: state}, nil
}

// Store puts the snapshot as a pack (Put) and returns its Info. Errors:
// Put's.
func (s Snapshot) Store(ctx context.Context) (Info, error) { return s.c.Put(ctx, s.h, s.state) }

// prefillChunks decodes toks[npast:] into seq (which holds toks[:npast])
// under o.Adapters: at foreground priority in one request, or at
// background priority in requests of at most o.Chunk tokens.
func prefillChunks(ctx context.Context, eng *runtime.Engine, seq int, toks []int32, npast int, o WarmOptions) error {
	chunk := len(toks)
	if o.Background && o.Chunk > 0 {
		chunk = o.Chunk
	}
	for npast < len(toks) {
		end := min(len(toks), npast+chunk)
		if _, err := eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:end], NPast: npast, PrefillOnly: true, Background: o.Background, Adapters: o.Adapters}); err != nil {
			return err
		}
		npast = end
	}
	return nil
}

// Prefix returns the snapshot cut to its first n tokens (positions
// [0, n), runtime.TruncateSeqState): a pack of a prefix of the sequence,
// such as a prompt's shared part. Errors: n not in [1, tokens], a state
// that does not parse (wrapping runtime.ErrBadState).
func (s Snapshot) Prefix(n int) (Snapshot, error) {
	if n < 1 || n > len(s.h.Tokens) {
		return Snapshot{}, fmt.Errorf("kvcache: prefix of %d tokens of a snapshot of %d", n, len(s.h.Tokens))
	}
	state, err := runtime.TruncateSeqState(s.state, n)
	if err != nil {
		return Snapshot{}, err
	}
	h := s.h
	h.Tokens = h.Tokens[:n:n]
	return Snapshot{c: s.c, h: h, state: state}, nil
}
