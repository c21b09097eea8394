package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/memosrt/memosrt/conversation"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/pipeline/status"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/textmem"
)

// Packs reports cube's packs, oldest first, and its resident state.
func (p *Pipeline) Packs(cube string) PackStatus {
	st := PackStatus{Cube: cube, Packs: p.CubePacks(cube)}
	if st.Packs == nil {
		st.Packs = []kvcache.Info{}
	}
	slices.SortFunc(st.Packs, func(a, b kvcache.Info) int { return a.Created.Compare(b.Created) })
	st.Levels = status.Levels(st.Packs, "")
	l, done := p.hold()
	defer done()
	if l == nil {
		return st
	}
	st.NCtx = l.eng.NCtx()
	if r, ok := l.res.Get(cube); ok {
		st.Resident = &ResidentStatus{Seq: r.Seq, Tokens: len(r.Toks), PackID: r.PackID, Created: r.Created}
		st.Levels = status.Levels(st.Packs, r.PackID)
	}
	st.ResidentCells = l.res.Cells()
	return st
}

// WarmOptions tune Warm.
type WarmOptions struct {
	// Resident also pins the pack at the resident level (its cells stay in
	// the KV cache and are shared into requests). Needs ResidentSeqs > 0.
	Resident bool
}

// Warm puts cube's memories into the activation tier now: every memory
// (canonical order) but recorded chat turns (Kind conversation.KindTurn) joins the
// cube's pack while it fits the pack budget,
// pinned (low heat never demotes them; deleting one does), and the pack's
// KV state is computed (foreground priority: the caller waits) and stored; with Resident
// the pack is also made resident. The next request of the cube restores
// the pack instead of prefilling it. Errors: textmem.ErrUnknownCube, *FieldError
// for a cube without memories or Resident without resident sequences,
// scheduler.ErrKVBudget, ErrNoModel.
func (p *Pipeline) Warm(ctx context.Context, cube string, wo WarmOptions) (PackStatus, error) {
	l, release, err := p.use(ctx, "", nil) // the tier's packs are the primary's
	if err != nil {
		return PackStatus{}, err
	}
	defer release()
	gen := p.gen(cube) // before the cube check: a delete after it is seen
	if err := p.CheckCube(ctx, cube); err != nil {
		return PackStatus{}, err
	}
	if cube == "" {
		return PackStatus{}, badField("cube", "a cube is required")
	}
	if wo.Resident && l.nres == 0 {
		return PackStatus{}, badField("resident", "no resident sequences (start with ResidentSeqs > 0, serve --resident N)")
	}
	// a delete of the cube meanwhile (DropCube) cancels its Promote or
	// refuses it: the cube is gone, not the request given up
	// (ErrUnknownCube, not ctx's error or a 500)
	gone := func(err error) error {
		if p.gen(cube) != gen {
			return fmt.Errorf("%w: %s (deleted while warming)", textmem.ErrUnknownCube, cube)
		}
		return err
	}
	start := time.Now()
	mems, err := p.mem.List(ctx, cube)
	if err != nil {
		return PackStatus{}, err
	}
	// recorded chat turns (the model's answers among them) are not the
	// cube's memories to pin: moved ones reach prompts by retrieval and
	// heat, short-term ones never (Layout.HideSources)
	mems = slices.DeleteFunc(mems, func(m textmem.Memory) bool {
		return m.Kind == conversation.KindTurn || slices.Contains(p.opts.Layout.HideSources, m.Source)
	})
	if len(mems) == 0 {
		return PackStatus{}, badField("cube", "cube %s has no memories to warm (recorded chat turns are not warmed)", cube)
	}
	ids := make([]string, len(mems))
	for i, m := range mems {
		ids[i] = m.ID
	}
	// not under kvMu: a pack computation takes as long as its prefill,
	// and conversation pack writes and cube deletes must not wait for it
	// (kvcache.Put and Delete serialise themselves; the scheduler runs one
	// computation at a time and refuses more than a few waiting)
	pk, err := p.tiers.Promote(ctx, cube, ids, "warm", true, wo.Resident)
	if errors.Is(err, scheduler.ErrBusy) {
		return PackStatus{}, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	if err != nil {
		return PackStatus{}, gone(err)
	}
	if p.gen(cube) != gen {
		// deleted while its pack was computed: leave nothing behind
		p.kvMu.Lock()
		for _, pk := range p.CubePacks(cube) {
			p.kv.Delete(pk.ID)
		}
		p.kvMu.Unlock()
		return PackStatus{}, fmt.Errorf("%w: %s (deleted while warming)", textmem.ErrUnknownCube, cube)
	}
	if wo.Resident {
		if err := p.applyResident(ctx, l); err != nil {
			return PackStatus{}, err
		}
	}
	st := p.Packs(cube)
	st.Memories = pk.Members
	st.WarmMs = float64(time.Since(start).Microseconds()) / 1e3
	return st, nil
}

// Tiers returns cube's tier state: each memory's tier, heat and KV chunk,
// the pack and its level, pending jobs, budgets, and the last limit
// transitions (all if limit <= 0). Recorded usage is written first.
func (p *Pipeline) Tiers(ctx context.Context, cube string, limit int) (scheduler.CubeTiers, error) {
	if err := p.FlushUsage(ctx); err != nil {
		return scheduler.CubeTiers{}, err
	}
	st, err := p.tiers.State(ctx, cube, limit)
	if err != nil {
		return st, err
	}
	chunks := map[string]string{} // memory id → chunk pack id
	for _, pk := range p.kv.List("") {
		if c, id, ok := ChunkOf(pk.Label); ok && c == cube {
			chunks[id] = pk.ID
		}
	}
	for i := range st.Memories {
		st.Memories[i].Chunk = chunks[st.Memories[i].ID]
	}
	return st, nil
}
