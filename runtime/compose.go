package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/memosrt/memosrt/runtime/llama"
)

// Composition joins per-memory KV chunks into one sequence for a request:
// each memory's tokens are prefilled on their own after a shared preamble
// (PrefillChunk) and saved; ComposeSeq restores the chunks in the order
// the request needs, moves each to its position with llama.cpp's K-shift
// (llama_memory_seq_add: K rows re-rotated by the position delta, V kept)
// and decodes a fraction of the chunk tokens again at their positions, so
// that they attend to the chunks before them. The selection follows
// CacheBlend (Yao et al., "CacheBlend: Fast Large Language Model Serving
// for RAG with Cached Knowledge Fusion", EuroSys 2025): the tokens whose
// KV deviates most from a full prefill, estimated on an early layer; plus
// fixed head and tail tokens (ComposeOptions).

// ErrNoShift is wrapped by ShiftGuard's reason when a model's KV cells may
// not be moved to other positions; ComposeSeq then decodes moved chunks
// again at their new positions instead of shifting them.
var ErrNoShift = errors.New("runtime: KV shift not allowed")

// ErrCompose is returned by ComposeSeq for chunks that do not fit the
// live context or contradict each other; seq and scratch are left empty.
var ErrCompose = errors.New("runtime: compose")

// Preamble is the shared start of every composed sequence (BOS, a system
// prompt): its tokens and their state, positions [0, len(Tokens)) in
// SaveSeq format. The zero Preamble is an empty one.
//
// A Held preamble has no State: the composed sequence already holds
// exactly positions [0, len(Tokens)) (a request's reused prefix: a slot, a
// resident or a restored pack). ComposeSeq then keeps those cells, places
// the chunks after them, and on an error removes only what it added.
type Preamble struct {
	Tokens []Token
	State  []byte
	Held   bool
}

// Chunk is one memory's KV computed on its own: State (SaveSeq format)
// holds exactly the cells of positions [Pos0, Pos0+len(Tokens)), computed
// after the preamble that PrefillChunk was given (Pos0 is its length).
type Chunk struct {
	Tokens []Token
	Pos0   int
	State  []byte
}

// ShiftGuard reports nil when K cells of a model with attention facts a
// and KV config kv may be moved by llama_memory_seq_add without loss, or
// an error wrapping ErrNoShift naming why not: a quantized K type (the
// shift dequantizes, rotates and quantizes K again, adding error on this
// CPU backend), M-RoPE or other multi-section RoPE (rotated by sections
// that positions alone do not give back; llama.cpp rotates the whole
// vector as NeoX there, build_rope_shift), a sliding-window or hybrid or
// recurrent cache (cells outside the window are gone; recurrent state has
// no positions), multi-head latent attention (a compressed latent beside
// a separate rotated part), no RoPE at all (nothing to shift: positions
// are baked in otherwise), or a KV cache that says it cannot shift
// (llama_memory_can_shift false: canShift).
func ShiftGuard(a llama.Attention, kv KVConfig, canShift bool) error {
	switch {
	case kv.TypeK != "f16" && kv.TypeK != "f32" && kv.TypeK != "bf16":
		return fmt.Errorf("%w: quantized K type %s", ErrNoShift, kv.TypeK)
	case a.RopeType == llama.RopeTypeMRoPE || a.RopeType == llama.RopeTypeIMRoPE || a.RopeType == llama.RopeTypeVision || a.RopeSections:
		return fmt.Errorf("%w: multi-section RoPE (M-RoPE, rope type %d)", ErrNoShift, a.RopeType)
	case a.RopeType == llama.RopeTypeNone:
		return fmt.Errorf("%w: the model has no RoPE", ErrNoShift)
	case a.NSWA > 0 || a.SlidingWindowMeta:
		return fmt.Errorf("%w: sliding-window attention (n_swa %d)", ErrNoShift, a.NSWA)
	case a.Hybrid || a.Recurrent:
		return fmt.Errorf("%w: hybrid or recurrent memory", ErrNoShift)
	case a.KVLoraRank > 0:
		return fmt.Errorf("%w: multi-head latent attention (kv_lora_rank %d)", ErrNoShift, a.KVLoraRank)
	case !canShift:
		return fmt.Errorf("%w: llama_memory_can_shift is false", ErrNoShift)
	}
	return nil
}

// ShiftGuard reports whether this engine's model and KV cache allow
// composition by shifting (nil) or force the recompute path (an error
// wrapping ErrNoShift). Decided once at Load.
func (e *Engine) ShiftGuard() error { return e.shiftErr }

// ComposeOptions choose what ComposeSeq decodes again. A chunk that keeps
// its prefill position is exact and never recomputed; the rules below
// apply to moved chunks. Zero fields mean the default; a negative Ratio
// means no selection by deviation (shift only, or Head and Tail only).
type ComposeOptions struct {
	// Head is how many first tokens of each moved chunk are decoded
	// again: they lack attention to the chunks before them. Default 0
	// (on stories260K the deviation ranking below did better per token:
	// BenchmarkComposeQuality).
	Head int
	// Tail is how many last tokens of the memory section (the last chunk,
	// when moved) are decoded again. Default 0.
	Tail int
	// Ratio is the budget of recomputed tokens as a fraction of all chunk
	// tokens (moved or not), head and tail included. What head and tail
	// leave of it is filled by CacheBlend's selection: the moved tokens
	// whose layer-ProbeLayer V deviates most (squared L2) from the V that
	// a full prefill gives there, measured by decoding the tokens from the
	// first moved chunk on through layers [0, ProbeLayer] only (needs
	// Options.BlendProbe). Default 0.15.
	Ratio float64
	// ProbeLayer is the layer whose V deviation ranks tokens, capped at
	// n_layer-1. Default 1, CacheBlend's choice of an early layer (layer
	// 0's V depends on the token alone and never deviates). On
	// stories260K layer 1 ranks as well as 2 since recomputed runs are
	// merged (98.0% / 63.3% against 97.9% / 60.0%,
	// BenchmarkComposeQuality), and on the 1B shape its probe costs
	// 1.1 s against 2.0 s of a 4.2 s composition (BenchmarkComposeTTFT).
	ProbeLayer int
	// Gap merges recomputed runs: two chosen tokens at most Gap positions
	// apart are recomputed as one run, the tokens between them included
	// and counted in the Ratio budget (a token is only chosen while the
	// run it makes still fits, so merging trades some high-deviation
	// tokens for their neighbours). Each run is one llama_decode, which
	// streams every weight once whatever its length: at 8x128 chunk
	// tokens and Ratio 0.15, 116 runs without merging, 26 at Gap 8, 12 at
	// Gap 32 (BenchmarkComposeTTFT). Default GapDefault; negative: no
	// merging (one run per stretch of consecutive chosen tokens).
	Gap int
}

// GapDefault is ComposeOptions.Gap's default, in tokens: a guess at what
// one decode's weight pass costs in prefilled tokens on a CPU (not yet
// measured on the 1B shape); on stories260K it costs 0.2 points of top-1
// and 2 of 30 greedy matches (BenchmarkComposeQuality).
const GapDefault = 8

// DefaultComposeOptions returns the defaults (measured on stories260K by
// BenchmarkComposeQuality).
func DefaultComposeOptions() ComposeOptions {
	return ComposeOptions{Ratio: 0.15, ProbeLayer: 1, Gap: GapDefault}
}

func (o ComposeOptions) withDefaults(nLayer int) ComposeOptions {
	d := DefaultComposeOptions()
	if o.Ratio == 0 {
		o.Ratio = d.Ratio
	}
	if o.ProbeLayer == 0 {
		o.ProbeLayer = d.ProbeLayer
	}
	if o.Gap == 0 {
		o.Gap = d.Gap
	}
	o.ProbeLayer = min(o.ProbeLayer, nLayer-1)
	o.Head, o.Tail, o.Ratio, o.Gap = max(o.Head, 0), max(o.Tail, 0), max(o.Ratio, 0), max(o.Gap, 0)
	return o
}

// ComposeResult reports one composition. Counts are tokens.
type ComposeResult struct {
	// Tokens is the composed token list: the preamble's, then each
	// chunk's in the order given; seq holds positions [0, len(Tokens)).
	// Generate continues it with Request{Tokens: append(Tokens, query...),
	// NPast: len(Tokens)}.
	Tokens      []Token
	ChunkTokens int   // tokens of all chunks
	Moved       int   // chunk tokens restored at another position (K-shifted)
	Recomputed  int   // chunk tokens decoded again (moved chunks under a guard count whole)
	Positions   []int // positions decoded again, ascending
	Probed      int   // tokens decoded through the probe layers for the CacheBlend selection
	// Guard is nil when moved chunks were shifted, else ShiftGuard's
	// reason for decoding them again in full.
	Guard error
	// Wall-clock time of the phases: restoring the preamble and chunks
	// (and shifting them), the probe decode that ranks tokens, and the
	// recompute; RecomputeDecodes is the llama_decode calls it took.
	RestoreTime, ProbeTime, RecomputeTime time.Duration
	RecomputeDecodes                      int
}

// Fraction returns Recomputed / ChunkTokens (0 with no chunk tokens).
func (r ComposeResult) Fraction() float64 {
	if r.ChunkTokens == 0 {
		return 0
	}
	return float64(r.Recomputed) / float64(r.ChunkTokens)
}

// PrefillPreamble prefills toks into seq from position 0 and returns them
// with their state; seq is left empty.
func (e *Engine) PrefillPreamble(ctx context.Context, seq int, toks []Token) (Preamble, error) {
	if err := e.ClearSeq(seq); err != nil {
		return Preamble{}, err
	}
	defer e.ClearSeq(seq)
	if len(toks) == 0 {
		return Preamble{}, nil
	}
	if err := e.Prefill(ctx, seq, toks, 0); err != nil {
		return Preamble{}, err
	}
	st, err := e.SaveSeq(seq)
	if err != nil {
		return Preamble{}, err
	}
	return Preamble{Tokens: slices.Clone(toks), State: st}, nil
}

// PrefillChunk prefills one memory's tokens into seq after pre (restored
// first; the zero Preamble puts the chunk at position 0) and returns the
// chunk: its cells, positions [len(pre.Tokens), len(pre.Tokens)+len(toks)).
// seq is left empty. Errors: those of RestoreSeq, Prefill and SaveSeq.
func (e *Engine) PrefillChunk(ctx context.Context, seq int, pre Preamble, toks []Token) (Chunk, error) {
	return e.PrefillChunkAt(ctx, seq, pre, toks, false)
}

// PrefillChunkAt is PrefillChunk with the priority of its prefill:
// background yields batch room to foreground requests (Request.Background).
func (e *Engine) PrefillChunkAt(ctx context.Context, seq int, pre Preamble, toks []Token, background bool) (Chunk, error) {
	if _, err := e.RestoreSeq(seq, pre.State); err != nil && len(pre.State) > 0 {
		return Chunk{}, err
	}
	defer e.ClearSeq(seq)
	if len(pre.State) == 0 {
		if err := e.ClearSeq(seq); err != nil {
			return Chunk{}, err
		}
	}
	p0 := len(pre.Tokens)
	full := make([]Token, p0+len(toks))
	copy(full[p0:], toks)
	if _, err := e.Generate(ctx, Request{Seq: seq, Tokens: full, NPast: p0, PrefillOnly: true, Background: background}); err != nil {
		return Chunk{}, err
	}
	st, err := e.SaveSeq(seq)
	if err != nil {
		return Chunk{}, err
	}
	st, err = SliceSeqState(st, p0, p0+len(toks))
	if err != nil {
		return Chunk{}, err
	}
	return Chunk{Tokens: slices.Clone(toks), Pos0: p0, State: st}, nil
}

// ComposeSeq fills seq with pre followed by chunks in the order given,
// chunk i at position len(pre.Tokens) + the lengths of chunks [0, i).
// A chunk at its prefill position is restored as it is. A moved chunk is
// restored into scratch, shifted there (llama_memory_seq_add) and shared
// into seq (llama_memory_seq_cp); then the tokens o selects are removed
// from seq and decoded again at their positions (see ComposeOptions).
// Under a ShiftGuard, moved chunks are not restored but decoded in full
// at their new positions; chunks computed at one position are never
// joined at another without a shift or a recompute.
//
// seq and scratch (one or more) are distinct sequences the caller holds
// (AcquireSeq); all are emptied first (seq but a Held preamble's cells),
// and scratch is left empty. Each
// scratch sequence past the first lets one more recomputed run share a
// llama_decode (see recomputeLocked; a guarded composition uses only the
// first: its moved chunks are not restored, so a run must wait for the
// runs before it). Shifted K cells are
// rotated at the next Decode of the context: the recompute does it, or,
// with nothing recomputed, the caller's Generate; do not SaveSeq seq
// before one. Cancelling ctx stops between batches and leaves seq empty.
//
// Errors: ErrCompose (a chunk's state does not hold exactly its
// positions; the composed length exceeds n_ctx), ErrBadState (a state
// made for another KV layout), ErrRestoreFailed, ErrBadOptions (a
// selection by deviation without Options.BlendProbe; a Held preamble
// whose length is not what seq holds), decode errors; seq is then left
// empty, or holding only a Held preamble.
func (e *Engine) ComposeSeq(ctx context.Context, seq int, scratch []int, pre Preamble, chunks []Chunk, o ComposeOptions) (ComposeResult, error) {
	o = o.withDefaults(e.kv.NLayer)
	var res ComposeResult
	if err := e.checkSeqs(seq, scratch); err != nil {
		return res, err
	}
	// parse and check every state before touching the context
	res.Tokens = slices.Clone(pre.Tokens)
	if pre.Held {
		if len(pre.State) > 0 {
			return res, fmt.Errorf("%w: a held preamble has no state", ErrCompose)
		}
		if n := e.SeqLen(seq); n != len(pre.Tokens) {
			return res, fmt.Errorf("%w: seq %d holds %d positions, held preamble %d tokens", ErrCompose, seq, n, len(pre.Tokens))
		}
	} else if len(pre.State) > 0 {
		s, err := ParseSeqState(pre.State)
		if err == nil {
			err = s.CheckAgainst(e.kv)
		}
		if err == nil && !spans(s.Positions, 0, len(pre.Tokens)) {
			err = fmt.Errorf("%w: preamble state does not hold positions [0, %d)", ErrCompose, len(pre.Tokens))
		}
		if err != nil {
			return res, err
		}
	} else if len(pre.Tokens) > 0 {
		return res, fmt.Errorf("%w: preamble of %d tokens without state", ErrCompose, len(pre.Tokens))
	}
	places := make([]chunkPlace, len(chunks))
	for i, c := range chunks {
		s, err := ParseSeqState(c.State)
		if err == nil {
			err = s.CheckAgainst(e.kv)
		}
		if err == nil && !spans(s.Positions, c.Pos0, c.Pos0+len(c.Tokens)) {
			err = fmt.Errorf("%w: chunk %d state does not hold positions [%d, %d)", ErrCompose, i, c.Pos0, c.Pos0+len(c.Tokens))
		}
		if err != nil {
			return res, err
		}
		places[i] = chunkPlace{c: c, pos: len(res.Tokens), moved: len(res.Tokens) != c.Pos0}
		res.Tokens = append(res.Tokens, c.Tokens...)
		res.ChunkTokens += len(c.Tokens)
	}
	if len(res.Tokens) >= e.kv.NCtx {
		return res, fmt.Errorf("%w: %d composed tokens, n_ctx %d", ErrCompose, len(res.Tokens), e.kv.NCtx)
	}
	res.Guard = e.shiftErr
	if o.Ratio > 0 && o.Ratio*float64(res.ChunkTokens) > float64(o.Head+o.Tail) && !e.opts.BlendProbe && res.Guard == nil {
		return res, fmt.Errorf("%w: ComposeOptions.Ratio selects by KV deviation, which needs Options.BlendProbe", ErrBadOptions)
	}

	if err := e.lock(); err != nil {
		return res, err
	}
	defer e.mu.Unlock()
	keep := -1 // seq's positions kept: none, or the held preamble's
	if pre.Held {
		keep = len(pre.Tokens)
	}
	emptyAll := func() {
		e.ctx.SeqRemove(seq, keep, -1)
		for _, s := range scratch {
			e.ctx.SeqRemove(s, -1, -1)
		}
	}
	fail := func(err error) (ComposeResult, error) {
		emptyAll()
		return res, err
	}
	t0 := time.Now()
	emptyAll()
	sc := scratch[0]
	if len(pre.State) > 0 {
		if err := e.ctx.StateSeqSet(seq, pre.State); err != nil {
			return fail(fmt.Errorf("%w (preamble): %w", ErrRestoreFailed, err))
		}
	}
	var redo []int // positions decoded again
	for _, p := range places {
		n := len(p.c.Tokens)
		if p.moved {
			res.Moved += n
			if res.Guard != nil {
				for k := range n {
					redo = append(redo, p.pos+k)
				}
				continue
			}
		}
		if err := e.ctx.StateSeqSet(sc, p.c.State); err != nil {
			return fail(fmt.Errorf("%w (chunk at %d): %w", ErrRestoreFailed, p.pos, err))
		}
		if p.moved {
			if err := e.ctx.SeqShift(sc, p.c.Pos0, -1, p.pos-p.c.Pos0); err != nil {
				return fail(err)
			}
		}
		if err := e.ctx.SeqCopy(sc, seq, -1, -1); err != nil {
			return fail(err)
		}
		e.ctx.SeqRemove(sc, -1, -1)
	}

	res.RestoreTime = time.Since(t0)
	if res.Guard == nil {
		pick := map[int]bool{} // head and tail
		var movedPos []int
		for _, p := range places {
			if !p.moved {
				continue
			}
			for k := range len(p.c.Tokens) {
				movedPos = append(movedPos, p.pos+k)
			}
			for k := range min(o.Head, len(p.c.Tokens)) {
				pick[p.pos+k] = true
			}
		}
		if last := places[len(places)-1:]; len(last) == 1 && last[0].moved {
			n := len(last[0].c.Tokens)
			for k := max(0, n-o.Tail); k < n; k++ {
				pick[last[0].pos+k] = true
			}
		}
		budget := int(math.Round(o.Ratio * float64(res.ChunkTokens)))
		sel := runCover{gap: o.Gap}
		for p := range pick {
			sel.add(p)
		}
		if budget > sel.cost && len(movedPos) > len(sel.pos) {
			t1 := time.Now()
			dev, err := e.deviationLocked(ctx, seq, sc, res.Tokens, places, o.ProbeLayer)
			res.ProbeTime = time.Since(t1)
			res.Probed = len(movedPos)
			if err != nil {
				return fail(err)
			}
			order := slices.Clone(movedPos)
			slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(dev[b], dev[a]) })
			for _, p := range order {
				if sel.cost >= budget {
					break
				}
				if sel.cost+sel.delta(p) <= budget {
					sel.add(p)
				}
			}
		}
		redo = sel.positions()
	}
	res.Positions = redo
	res.Recomputed = len(redo)
	t2 := time.Now()
	waves := scratch
	if res.Guard != nil {
		waves = scratch[:1]
	}
	n, err := e.recomputeLocked(ctx, seq, waves, res.Tokens, redo)
	res.RecomputeTime, res.RecomputeDecodes = time.Since(t2), n
	if err != nil {
		return fail(err)
	}
	return res, nil
}

// recomputeLocked decodes the tokens at positions redo (ascending) of seq
// again and returns the llama_decode calls it took. llama.cpp takes a
// sequence's batch only at consecutive positions right after the
// sequence's last one (llama_batch_allocr::init), so each run of
// consecutive positions [a, b) is decoded in a scratch sequence holding
// seq's cells [0, a) (shared, llama_memory_seq_cp), and its new cells
// then replace the run's old ones in seq. With k scratch sequences, k runs
// go into one batch (a wave): one pass over the weights instead of k,
// since each llama_decode streams every weight whatever its length. Within
// a wave a run attends to the restored KV of the wave's earlier runs, not
// their recomputed KV (those are decoded in the same pass); across waves,
// and with one scratch sequence, to the recomputed KV. Every scratch
// sequence is left empty. Caller holds e.mu.
func (e *Engine) recomputeLocked(ctx context.Context, seq int, scratch []int, toks []Token, redo []int) (int, error) {
	type run struct{ a, b, seq int }
	var runs []run
	for i := 0; i < len(redo); {
		j := i + 1
		for j < len(redo) && redo[j] == redo[j-1]+1 {
			j++
		}
		runs = append(runs, run{a: redo[i], b: redo[j-1] + 1})
		i = j
	}
	defer func() {
		for _, s := range scratch {
			e.ctx.SeqRemove(s, -1, -1)
		}
	}()
	decodes := 0
	for w := 0; w < len(runs); w += len(scratch) {
		wave := runs[w:min(w+len(scratch), len(runs))]
		for i := range wave {
			r := &wave[i]
			r.seq = scratch[i]
			e.ctx.SeqRemove(r.seq, -1, -1)
			if r.a > 0 {
				if err := e.ctx.SeqCopy(seq, r.seq, 0, r.a); err != nil {
					return decodes, err
				}
			}
		}
		for _, r := range wave {
			if !e.ctx.SeqRemove(seq, r.a, r.b) {
				return decodes, fmt.Errorf("%w: cannot remove positions [%d, %d)", ErrCompose, r.a, r.b)
			}
		}
		// one batch of every run's tokens, split only where it exceeds
		// n_batch (a run split across batches stays consecutive)
		e.batch.Clear()
		for _, r := range wave {
			for p := r.a; p < r.b; p++ {
				if e.batch.Len() == e.batch.Cap() {
					if err := e.decodeBatchLocked(ctx, p); err != nil {
						return decodes, err
					}
					decodes++
				}
				if err := e.batch.Add(toks[p], p, r.seq, false); err != nil {
					return decodes, err
				}
			}
		}
		if e.batch.Len() > 0 {
			if err := e.decodeBatchLocked(ctx, wave[len(wave)-1].b-1); err != nil {
				return decodes, err
			}
			decodes++
		}
		for _, r := range wave {
			if err := e.ctx.SeqCopy(r.seq, seq, r.a, r.b); err != nil {
				return decodes, err
			}
		}
	}
	return decodes, nil
}

// decodeBatchLocked decodes e.batch after checking ctx and clears it; at
// names a position for the error. Caller holds e.mu.
func (e *Engine) decodeBatchLocked(ctx context.Context, at int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := e.ctx.Decode(e.batch); err != nil {
		return fmt.Errorf("runtime: compose decode at %d: %w", at, err)
	}
	e.batch.Clear()
	return nil
}

// checkSeqs checks that seq and the scratch sequences (at least one) are
// distinct and in [0, NSeqMax).
func (e *Engine) checkSeqs(seq int, scratch []int) error {
	all := append([]int{seq}, scratch...)
	bad := len(scratch) == 0
	for i, s := range all {
		if s < 0 || s >= e.opts.NSeqMax || slices.Contains(all[:i], s) {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("%w: seq %d and scratch %v must be distinct in [0, %d), at least one scratch", ErrCompose, seq, scratch, e.opts.NSeqMax)
	}
	return nil
}

// runCover is a set of chosen positions (pos, ascending) and what
// recomputing them costs: two chosen positions at most gap apart are one
// run, the positions between them recomputed too; cost counts every
// recomputed position.
type runCover struct {
	gap  int
	pos  []int
	cost int
}

// fill is how many positions between chosen a < b are recomputed.
func (c *runCover) fill(a, b int) int {
	if b-a-1 <= c.gap {
		return b - a - 1
	}
	return 0
}

// delta is what choosing p adds to cost: p itself and the gaps it fills
// to its chosen neighbours a < p < b, less the gap between a and b that
// was filled before (0 when p already lay in it).
func (c *runCover) delta(p int) int {
	i, found := slices.BinarySearch(c.pos, p)
	if found {
		return 0
	}
	d := 1
	if i > 0 {
		d += c.fill(c.pos[i-1], p)
	}
	if i < len(c.pos) {
		d += c.fill(p, c.pos[i])
	}
	if i > 0 && i < len(c.pos) {
		d -= c.fill(c.pos[i-1], c.pos[i])
	}
	return d
}

// add chooses p.
func (c *runCover) add(p int) {
	c.cost += c.delta(p)
	if i, found := slices.BinarySearch(c.pos, p); !found {
		c.pos = slices.Insert(c.pos, i, p)
	}
}

// positions returns every recomputed position, ascending.
func (c *runCover) positions() []int {
	var out []int
	for i, p := range c.pos {
		if i > 0 && c.fill(c.pos[i-1], p) > 0 {
			for q := c.pos[i-1] + 1; q < p; q++ {
				out = append(out, q)
			}
		}
		out = append(out, p)
	}
	return out
}

// spans reports whether pos holds each position of [p0, p1) exactly once.
func spans(pos []int32, p0, p1 int) bool {
	if len(pos) != p1-p0 {
		return false
	}
	seen := make([]bool, p1-p0)
	for _, p := range pos {
		i := int(p) - p0
		if i < 0 || i >= len(seen) || seen[i] {
			return false
		}
		seen[i] = true
	}
	return true
}

// chunkPlace is a chunk at its new position pos (of its first token).
type chunkPlace struct {
	c     Chunk
	pos   int
	moved bool // pos differs from c.Pos0
}

// deviationLocked returns, for every position of the moved chunks, the
// squared L2 distance between layer's V as restored (the chunk's state)
// and as a full prefill computes it. Every token from the first moved
// chunk on is decoded, in one batch, into scratch holding seq's cells
// before it, with the tensor tap on "Vcur-<layer>" (each graph stops after
// it): only layers [0, layer] are computed. Layer 0's K and V depend on
// the token and, through RoPE, its position only, so every restored cell
// is exact there and the tapped V is the full prefill's. scratch is left
// empty. Caller holds e.mu.
func (e *Engine) deviationLocked(ctx context.Context, seq, scratch int, toks []Token, places []chunkPlace, layer int) (map[int]float64, error) {
	if !e.opts.BlendProbe {
		return nil, fmt.Errorf("%w: selection by KV deviation needs Options.BlendProbe", ErrBadOptions)
	}
	if layer < 1 || layer >= e.kv.NLayer {
		return nil, fmt.Errorf("%w: probe layer %d not in [1, %d)", ErrBadOptions, layer, e.kv.NLayer)
	}
	from := -1
	for _, p := range places {
		if p.moved {
			from = p.pos
			break
		}
	}
	if from < 0 {
		return nil, nil
	}
	defer e.ctx.SeqRemove(scratch, -1, -1)
	e.ctx.SeqRemove(scratch, -1, -1)
	if from > 0 {
		if err := e.ctx.SeqCopy(seq, scratch, 0, from); err != nil {
			return nil, err
		}
	}
	if err := e.ctx.TapStart(fmt.Sprintf("Vcur-%d", layer)); err != nil {
		return nil, err
	}
	err := e.decodeAtLocked(ctx, scratch, toks[from:], from)
	vals, terr := e.ctx.TapStop()
	if err != nil {
		return nil, err
	}
	if terr != nil {
		return nil, terr
	}
	n := len(toks) - from
	if len(vals)%n != 0 {
		return nil, fmt.Errorf("%w: probe captured %d values for %d tokens", ErrCompose, len(vals), n)
	}
	width := len(vals) / n
	dev := map[int]float64{}
	for _, m := range places {
		if !m.moved {
			continue
		}
		n := len(m.c.Tokens)
		stored, w, err := seqStateV(m.c.State, layer)
		if err != nil {
			return nil, err
		}
		if w != width || len(stored) != n {
			return nil, fmt.Errorf("%w: stored V %d×%d, probe %d×%d", ErrCompose, n, w, len(stored), width)
		}
		for k := range n {
			i := m.pos + k - from
			var d float64
			for c, v := range vals[i*width : (i+1)*width] {
				x := float64(v - stored[k][c])
				d += x * x
			}
			dev[m.pos+k] = d
		}
	}
	return dev, nil
}

// decodeAtLocked decodes toks at positions [pos0, pos0+len(toks)) of seq,
// without logits, in batches of the engine's batch size, checking ctx
// between them. Caller holds e.mu.
func (e *Engine) decodeAtLocked(ctx context.Context, seq int, toks []Token, pos0 int) error {
	e.batch.Clear()
	for i, tok := range toks {
		if err := e.batch.Add(tok, pos0+i, seq, false); err != nil {
			return err
		}
		if e.batch.Len() == e.batch.Cap() || i == len(toks)-1 {
			if err := e.decodeBatchLocked(ctx, pos0+i); err != nil {
				return err
			}
		}
	}
	return nil
}
