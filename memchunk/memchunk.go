package memchunk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// Scratch is how many scratch sequences a Composer wants: the recomputed
// runs of a composition share one llama_decode per this many
// (runtime.Engine.ComposeSeq's waves; each decode streams every weight).
const Scratch = 16

// ErrBusy is returned by Make (without wait) while a composition or
// another chunk prefill holds the scratch sequences.
var ErrBusy = errors.New("memchunk: the scratch sequences are in use")

// prefix starts the label of every memory chunk.
const prefix = "chunk:"

// Label is the label of the chunks of memory id in cube.
func Label(cube, id string) string { return prefix + cube + ":" + id }

// Scope is the kvcache scope of cube's chunks.
func Scope(cube string) string { return cube + "\x00chunk" }

// Of splits a memory chunk's label into its cube and memory id; ok is
// false for any other pack.
func Of(label string) (cube, id string, ok bool) {
	rest, ok := strings.CutPrefix(label, prefix)
	if ok {
		cube, id, ok = strings.Cut(rest, ":")
	}
	if !ok {
		return "", "", false
	}
	return cube, id, true
}

// ID is the pack id of the chunk of a memory of cube whose line has toks,
// under cfgKey (kvcache.ConfigKey of the KV config and adapter set).
func ID(cfgKey, cube string, toks []int32) string {
	return kvcache.PackID(kvcache.ScopedKey(cfgKey, Scope(cube)), toks)
}

// List returns the chunks kv stores of cube ("" for every cube's).
func List(kv *kvcache.Cache, cube string) []kvcache.Info {
	var out []kvcache.Info
	for _, pk := range kv.List("") {
		if c, _, ok := Of(pk.Label); ok && (cube == "" || c == cube) {
			out = append(out, pk)
		}
	}
	return out
}

// Composer composes one loaded model's requests from chunks and makes its
// chunks. Safe for concurrent use; mu serialises the scratch sequences.
type Composer struct {
	eng     *runtime.Engine
	lay     *layout.Layout
	kv      *kvcache.Cache
	cfgKey  string  // kvcache.ConfigKey of the live KV config, no adapters
	ratio   float64 // recompute fraction, > 0
	scratch []int   // the caller's sequences, at least one

	mu  sync.Mutex       // guards the scratch sequences and pre
	pre runtime.Preamble // the chunks' preamble (BOS), made on first use
}

// NewComposer returns a Composer over eng's sequences scratch (held by
// the caller, at least one; Scratch for full waves), composing at the
// recompute fraction ratio in (0, 1].
func NewComposer(eng *runtime.Engine, lay *layout.Layout, kv *kvcache.Cache, scratch []int, ratio float64) *Composer {
	return &Composer{eng: eng, lay: lay, kv: kv, cfgKey: kvcache.ConfigKey(eng.KVConfig(), ""), ratio: ratio, scratch: scratch}
}

// Ratio returns the recompute fraction.
func (c *Composer) Ratio() float64 { return c.ratio }

// Has reports whether memory m of cube has a chunk of its current text.
func (c *Composer) Has(cube string, m textmem.Memory) (bool, error) {
	toks, err := c.lay.LineTokens(m)
	if err != nil {
		return false, err
	}
	_, ok := c.kv.Info(ID(c.cfgKey, cube, toks))
	return ok, nil
}

// preambleLocked returns the chunks' shared preamble (the model's BOS),
// prefilling it on first use. Caller holds c.mu.
func (c *Composer) preambleLocked(ctx context.Context) (runtime.Preamble, error) {
	if len(c.pre.Tokens) > 0 {
		return c.pre, nil
	}
	pre, err := c.eng.PrefillPreamble(ctx, c.scratch[0], []runtime.Token{c.eng.BOS()})
	if err != nil {
		return pre, err
	}
	c.pre = pre
	return pre, nil
}

// Make prefills memory m's chunk of cube unless it is stored already
// (made false) and hands it to store (the caller's kvcache Put, under its
// own write lock; it may decline with a nil error). wait: wait for the
// scratch sequences and prefill at foreground priority; else ErrBusy at
// once and background priority. reserve takes the chunk's KV cells for
// the prefill (n cells; the returned func gives them back). Errors:
// ErrBusy, reserve's, the engine's, store's.
func (c *Composer) Make(ctx context.Context, cube string, m textmem.Memory, wait bool,
	reserve func(n int) (func(), error), store func(kvcache.Header, []byte) error) (made bool, err error) {
	toks, err := c.lay.LineTokens(m)
	if err != nil || len(toks) == 0 {
		return false, err
	}
	if _, ok := c.kv.Info(ID(c.cfgKey, cube, toks)); ok {
		return false, nil
	}
	if wait {
		c.mu.Lock()
	} else if !c.mu.TryLock() {
		return false, ErrBusy
	}
	defer c.mu.Unlock()
	release, err := reserve(len(toks) + 1)
	if err != nil {
		return false, err
	}
	defer release()
	pre, err := c.preambleLocked(ctx)
	if err != nil {
		return false, err
	}
	ch, err := c.eng.PrefillChunkAt(ctx, c.scratch[0], pre, toks, !wait)
	if err != nil {
		return false, err
	}
	h := kvcache.Header{KV: c.eng.KVConfig(), Tokens: toks, NCtxNeeded: ch.Pos0 + len(toks), Label: Label(cube, m.ID), Scope: Scope(cube)}
	return true, store(h, ch.State)
}

// Plan is what a prompt can compose: the leading run of its retrieved
// memories that have chunks, tokens [First, End) of the prompt.
type Plan struct {
	First, End int
	IDs        []string // the memories composed, prompt order
	// Ratio, when not 0, replaces the Composer's recompute fraction for
	// this composition (runtime.ComposeOptions.Ratio: negative, shift
	// only); the calibration gate's per-model choice.
	Ratio  float64
	chunks []runtime.Chunk
}

// Plan finds the chunks of a prompt's last retrieved block: spans give
// each retrieved memory's tokens in toks (layout.Prompt.RetrievedSpans),
// ids their memory ids and cubes the cube each lives in (a request may
// read several; a chunk is kept in its memory's cube). Only a leading run of memories with chunks is
// planned (a memory without one would have to be decoded between restored
// chunks); ok is false when the first has none or npast, the tokens the
// sequence holds, reaches into the block.
func (c *Composer) Plan(cubes []string, toks []int32, npast int, spans []layout.Span, ids []string) (Plan, bool) {
	if len(spans) == 0 || npast > spans[0].Start {
		return Plan{}, false
	}
	pl := Plan{First: spans[0].Start, End: spans[0].Start}
	for i, sp := range spans {
		if sp.Start != pl.End || sp.End >= len(toks) {
			break
		}
		h, state, _, err := c.kv.State(ID(c.cfgKey, cubes[i], toks[sp.Start:sp.End]))
		if err != nil {
			break
		}
		pl.chunks = append(pl.chunks, runtime.Chunk{Tokens: h.Tokens, Pos0: 1, State: state})
		pl.IDs = append(pl.IDs, ids[i])
		pl.End = sp.End
	}
	return pl, len(pl.chunks) > 0
}

// Composed is what Compose placed into a sequence. Counts are tokens.
type Composed struct {
	Exact      int // the sequence holds toks[:Exact] exactly: the reused prefix and the prefill up to the chunks
	Tokens     int // chunk tokens placed after Exact (composed_tokens)
	Recomputed int // of them, decoded again (recomputed_tokens)
	Result     runtime.ComposeResult
}

// Compose makes seq, which holds toks[:npast] (npast <= pl.First), hold
// toks[:pl.End]: it prefills toks[npast:pl.First] (at background priority
// with background) and composes the planned chunks after them at the
// Composer's ratio (pl.Ratio when set). reserve takes the probe's cells (as many as the chunk
// tokens) for the time of it. ok is false, with nothing changed, when the
// scratch sequences are busy or reserve fails. On an error seq holds
// Composed.Exact tokens (npast when the prefill failed): the caller
// prefills the rest.
func (c *Composer) Compose(ctx context.Context, seq int, toks []int32, npast int, pl Plan, background bool,
	reserve func(n int) (func(), error)) (out Composed, ok bool, err error) {
	out.Exact = npast
	if !c.mu.TryLock() {
		return out, false, nil
	}
	defer c.mu.Unlock()
	release, err := reserve(pl.End - pl.First)
	if err != nil {
		return out, false, nil
	}
	defer release()
	if npast < pl.First {
		_, err := c.eng.Generate(ctx, runtime.Request{Seq: seq, Tokens: toks[:pl.First], NPast: npast, PrefillOnly: true, Background: background})
		if err != nil {
			return out, true, fmt.Errorf("memchunk: prefill before the chunks: %w", err)
		}
	}
	out.Exact = pl.First
	ratio := c.ratio
	if pl.Ratio != 0 {
		ratio = pl.Ratio
	}
	res, err := c.eng.ComposeSeq(ctx, seq, c.scratch, runtime.Preamble{Tokens: toks[:pl.First], Held: true}, pl.chunks,
		runtime.ComposeOptions{Ratio: ratio})
	if err != nil {
		return out, true, err
	}
	out.Tokens, out.Recomputed, out.Result = res.ChunkTokens, res.Recomputed, res
	return out, true, nil
}

// Sweep deletes (through del, the caller's kvcache Delete under its write
// lock) the stored chunks whose memory mem no longer has, or whose text
// changed since: their id is not the one of the memory's line now. It
// returns how many it deleted. Errors: mem's but not found, del's.
func (c *Composer) Sweep(ctx context.Context, mem *textmem.Store, del func(id string) error) (int, error) {
	n := 0
	for _, pk := range List(c.kv, "") {
		cube, id, _ := Of(pk.Label)
		stale := false
		m, err := mem.Get(ctx, cube, id)
		switch {
		case errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrUnknownCube):
			stale = true
		case err != nil:
			return n, err
		default:
			toks, err := c.lay.LineTokens(m)
			if err != nil {
				return n, err
			}
			stale = ID(kvcache.ConfigKey(c.eng.KVConfig(), pk.AdapterKey), cube, toks) != pk.ID
		}
		if !stale {
			continue
		}
		if err := del(pk.ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			return n, err
		}
		n++
	}
	return n, nil
}

// Counter counts retrievals per memory towards its chunk; the zero
// Counter is ready. Safe for concurrent use.
type Counter struct {
	mu sync.Mutex
	n  map[[2]string]int // (cube, memory id) → retrievals since made or taken
}

// Add counts one retrieval of each of ids in cube.
func (c *Counter) Add(cube string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[[2]string]int{}
	}
	for _, id := range ids {
		c.n[[2]string{cube, id}]++
	}
}

// Take returns the (cube, memory id) pairs retrieved at least k times and
// forgets their counts.
func (c *Counter) Take(k int) [][2]string {
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

// Decide returns the recompute fraction a model composes at: compose
// (Options.Compose), or hook's answer for the model's KV key when it has
// one, clamped to [0, 1]; 0 (off) with guard, the engine's
// runtime.Engine.ShiftGuard (its KV cells may not be moved: exact prefill
// always).
func Decide(compose float64, hook func(modelKey string) (float64, bool), modelKey string, guard error) float64 {
	r := compose
	if hook != nil {
		if v, ok := hook(modelKey); ok {
			r = v
		}
	}
	if guard != nil {
		return 0
	}
	return min(max(r, 0), 1)
}

// Result reports MakeAll.
type Result struct {
	Made    int `json:"made"`    // chunks computed and stored now
	Present int `json:"present"` // chunks stored already (the memory unchanged)
}

// MakeAll makes the chunks of mems of cube as Make does (waiting), in
// order. Errors: Make's, after the chunks before it were made.
func (c *Composer) MakeAll(ctx context.Context, cube string, mems []textmem.Memory,
	reserve func(n int) (func(), error), store func(kvcache.Header, []byte) error) (Result, error) {
	var res Result
	for _, m := range mems {
		made, err := c.Make(ctx, cube, m, true, reserve, store)
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

// Tick is a scheduler tick's chunk work: Sweep (del deletes); while room,
// given the bytes all chunks hold, says the KV tier's budget is exceeded,
// the oldest chunks are deleted (chunks yield to the tier's packs); then
// the chunks of the memories counted k times (Counter.Take) are made, at
// background priority (busy scratch sequences: the memory waits for its
// next retrievals), while room says there is room, and the oldest trimmed
// again if the last one made did not fit. store as Make's.
// Errors: Sweep's, room's, mem's but not found, Make's but ErrBusy and
// reserve's.
func (c *Composer) Tick(ctx context.Context, mem *textmem.Store, uses *Counter, k int, room func(chunkBytes int64) (bool, error),
	reserve func(n int) (func(), error), store func(kvcache.Header, []byte) error, del func(id string) error) error {
	if _, err := c.Sweep(ctx, mem, del); err != nil {
		return err
	}
	if err := c.trim(room, del); err != nil {
		return err
	}
	for _, key := range uses.Take(k) {
		var bytes int64
		for _, pk := range List(c.kv, "") {
			bytes += pk.RawBytes
		}
		if ok, err := room(bytes); err != nil || !ok {
			return err
		}
		m, err := mem.Get(ctx, key[0], key[1])
		if errors.Is(err, textmem.ErrNotFound) || errors.Is(err, textmem.ErrUnknownCube) {
			continue
		}
		if err != nil {
			return err
		}
		reserved := false
		res := func(n int) (func(), error) {
			f, err := reserve(n)
			reserved = err == nil
			return f, err
		}
		if _, err := c.Make(ctx, key[0], m, false, res, store); err != nil && !errors.Is(err, ErrBusy) && reserved {
			return err
		}
	}
	return c.trim(room, del) // the last one made may not fit
}

// trim deletes the oldest chunks while room, given the bytes all chunks
// hold, says the KV tier's budget is exceeded.
func (c *Composer) trim(room func(chunkBytes int64) (bool, error), del func(id string) error) error {
	all := List(c.kv, "")
	slices.SortFunc(all, func(a, b kvcache.Info) int { return a.Created.Compare(b.Created) })
	var total int64
	for _, pk := range all {
		total += pk.RawBytes
	}
	for len(all) > 0 {
		ok, err := room(total - 1)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if err := del(all[0].ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			return err
		}
		total -= all[0].RawBytes
		all = all[1:]
	}
	return nil
}
