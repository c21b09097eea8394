package kvcache

import (
	"context"
	"errors"
	"fmt"
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
	h, state, fromRAM, err := c.State(m.ID)
	if errors.Is(err, ErrNotFound) {
		// deleted meanwhile, or a shared pack whose blob was evicted: a miss
		err := eng.ClearSeq(seq)
		r.Duration = time.Since(start)
		return r, err
	}
	if err == nil {
		err = h.Check(live, adapterKey)
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

// WarmOptions tune Warm.
type WarmOptions struct {
	Adapters   []runtime.AdapterRef // LoRA set the state is computed under
	Label      string               // e.g. the cube
	Scope      string               // isolation domain (Header.Scope), the cube; "" = unscoped
	Background bool                 // prefill at background priority (runtime.Request.Background)
}

// Warm prefills toks into seq (emptied first) under the given adapters, saves
// the sequence state as a pack, and returns its Info. If an identical pack
// exists it is restored instead of recomputed. seq holds toks afterwards.
func (c *Cache) Warm(ctx context.Context, eng *runtime.Engine, seq int, toks []int32, o WarmOptions) (Info, error) {
	if len(toks) == 0 {
		return Info{}, fmt.Errorf("kvcache: warm: no tokens")
	}
	adapterKey, label, scope := runtime.AdapterKey(o.Adapters), o.Label, o.Scope
	live := eng.KVConfig()
	id := PackID(ScopedKey(ConfigKey(live, adapterKey), scope), toks)
	c.mu.Lock()
	rec := c.packs[id]
	c.mu.Unlock()
	if rec != nil {
		if _, err := c.Restore(ctx, eng, seq, append(append([]int32{}, toks...), 0), RestoreOptions{AdapterKey: adapterKey, Scope: scope}); err != nil {
			return Info{}, err
		}
		if eng.SeqLen(seq) == len(toks) {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.info(rec), nil
		}
	}
	if err := eng.PrefillRequest(ctx, seq, toks, o.Adapters, o.Background); err != nil {
		return Info{}, err
	}
	state, err := eng.SaveSeq(seq)
	if err != nil {
		return Info{}, err
	}
	return c.Put(ctx, Header{KV: live, AdapterKey: adapterKey, Tokens: toks, Label: label, Scope: scope}, state)
}
