package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/scheduler"
)

// AddUses buffers uses (counted at Options.Clock's now) and kicks the
// scheduler after TickAfterUses of them.
func (p *Pipeline) AddUses(uses []scheduler.Use) {
	if p.usage.Add(uses, p.opts.Clock.Now()) >= p.opts.TickAfterUses {
		p.Kick()
	}
}

// FlushUsage writes the buffered uses (scheduler.UsageBuffer.Flush).
func (p *Pipeline) FlushUsage(ctx context.Context) error {
	return p.usage.Flush(ctx, p.tiers)
}

// Kick asks the background loop (Run) for a tick soon (after a burst of
// usage, a deleted memory, a model load, a parametric change). Never
// blocks.
func (p *Pipeline) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Tick runs one scheduler tick: it writes recorded usage, plans and runs
// tier moves (promotions, demotions, pack refreshes; see
// scheduler.Tiers.Tick) and then sets the resident level from pack heat.
// With load the primary is loaded for it, as a request would (errors as
// Use); without, an unloaded primary makes it a no-op (tier jobs wait for
// its next load). Errors: a failed job's error (it stays pending), ctx's
// error.
func (p *Pipeline) Tick(ctx context.Context, load bool) (scheduler.TickReport, error) {
	if load {
		_, release, err := p.use(ctx, "", nil)
		if err != nil {
			return scheduler.TickReport{}, err
		}
		defer release()
	}
	p.usage.ResetSince()
	if err := p.FlushUsage(ctx); err != nil {
		return scheduler.TickReport{}, err
	}
	l, done := p.hold()
	defer done()
	if l == nil {
		return scheduler.TickReport{}, nil // unloaded: tier jobs wait for its next load
	}
	rep, err := p.tiers.Tick(ctx)
	if errors.Is(err, scheduler.ErrReadOnly) {
		return rep, nil // unloaded meanwhile
	}
	if rerr := p.applyResident(ctx, l); rerr != nil && err == nil {
		err = rerr
	}
	if cerr := p.tickChunks(ctx, l); cerr != nil && err == nil {
		err = cerr
	}
	return rep, err
}

// reclaimCheck is how often Run asks whether the value log has grown by a
// file since the last value-log GC pass (datadir.DB.ReclaimDue).
const reclaimCheck = 5 * time.Second

// Run is the background loop of an OS until ctx ends: it writes recorded
// usage every Options.UsageFlush, runs sweep (the expired memories'
// delete; nil: none) and a Tick without load every Tiers.Interval
// (default 10 s) and soon after a Kick, and the value-log GC
// (datadir.DB.Reclaim) every GCInterval and as soon as the value log has
// grown by a file since the last pass (datadir.DB.ReclaimDue, checked
// every reclaimCheck). Jobs decode at background priority
// (runtime.Request.Background): foreground requests go first and a job
// yields between small batches. Failures are logged; the loop goes on.
func (p *Pipeline) Run(ctx context.Context, sweep func(context.Context) error) {
	interval := p.opts.Tiers.Interval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	flush := time.NewTicker(p.opts.UsageFlush)
	defer flush.Stop()
	gc := time.NewTicker(p.opts.GCInterval)
	defer gc.Stop()
	grown := time.NewTicker(reclaimCheck)
	defer grown.Stop()
	reclaim := func() {
		start := time.Now()
		if n, err := p.db.Reclaim(); err != nil {
			p.log.Warn("value-log GC failed", "err", err)
		} else if ms := time.Since(start).Milliseconds(); n > 0 || ms >= 1000 {
			p.log.Info("value-log GC", "files_rewritten", n, "ms", ms)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-gc.C:
			reclaim()
			continue
		case <-grown.C:
			if p.db.ReclaimDue() {
				reclaim()
			}
			continue
		case <-flush.C:
			if err := p.FlushUsage(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("usage not recorded", "err", err)
			}
			continue
		case <-tick.C:
		case <-p.kick:
		}
		if sweep != nil {
			if err := sweep(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("expired memories not swept", "err", err)
			}
		}
		if _, err := p.Tick(ctx, false); err != nil && ctx.Err() == nil {
			p.log.Warn("tick failed", "err", err)
		}
	}
}

// applyResident sets the resident level from the tiers: pinned resident
// packs, then the hottest packs at or above ResidentAt, while resident
// sequences and ResidentCells last. Packs no longer wanted (cold, over
// budget, recomputed) leave it first.
func (p *Pipeline) applyResident(ctx context.Context, l *loaded) error {
	nres := l.nres
	if nres == 0 {
		return nil
	}
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	hot, err := p.tiers.HotPacks(ctx)
	if err != nil {
		return err
	}
	want := map[string]scheduler.PackHeat{}
	cells := 0
	reason := map[string]string{}
	for _, pk := range hot {
		why := "heat"
		if pk.Resident {
			why = "pinned"
		} else if pk.Heat < p.opts.ResidentAt {
			reason[pk.Cube] = "cold"
			continue
		}
		if len(want) >= nres || cells+pk.Tokens > p.opts.ResidentCells {
			reason[pk.Cube] = "budget"
			continue
		}
		want[pk.Cube], reason[pk.Cube] = pk, why
		cells += pk.Tokens
	}
	// leave first, so that their sequences and cells are free
	leave := l.res.Leave(func(cube, packID string) bool {
		w, ok := want[cube]
		return ok && w.PackID == packID
	})
	for _, cube := range leave {
		why := reason[cube]
		if why == "" || why == "heat" || why == "pinned" {
			why = "changed"
		}
		if err := p.tiers.SetResident(ctx, cube, "", false, why); err != nil {
			return err
		}
	}
	for cube, pk := range want {
		if _, have := l.res.Get(cube); have {
			continue
		}
		if err := p.makeResident(ctx, l, cube, pk.PackID); err != nil {
			lvl := slog.LevelWarn
			if errors.Is(err, slots.ErrNoRoom) {
				lvl = slog.LevelDebug // requests hold the cells now (load): a later tick tries again
			}
			p.log.Log(ctx, lvl, "pack not made resident", "cube", cube, "pack", pk.PackID, "err", err)
			continue
		}
		if err := p.tiers.SetResident(ctx, cube, pk.PackID, true, reason[cube]); err != nil {
			return err
		}
	}
	return nil
}

// makeResident restores stored pack id into a free resident sequence.
func (p *Pipeline) makeResident(ctx context.Context, l *loaded, cube, id string) error {
	h, state, _, err := p.kv.State(id)
	if err != nil {
		return err
	}
	if err := h.Check(l.eng.KVConfig(), ""); err != nil {
		return err
	}
	// room first: idle slots give their cells back; the cells count as
	// resident (fixed) once the pack is in l.res
	release, err := l.pool.ReserveNow(l.resSlot, len(h.Tokens), l.eng.NCtx(), l.res.NoEvict(), l.clearSeq)
	if err != nil {
		return err
	}
	defer release()
	seq, ok := l.res.Take()
	if !ok {
		return fmt.Errorf("memosrt: no free resident sequence")
	}
	if _, err := l.eng.RestoreSeq(seq, state); err != nil {
		l.eng.ClearSeq(seq) // a failed restore leaves nothing behind
		l.res.Return(seq)
		return err
	}
	now := time.Now()
	l.res.Set(cube, slots.ResidentPack{Seq: seq, Adapters: h.AdapterKey, Toks: slices.Clone(h.Tokens), PackID: id, Created: now, Used: now})
	return ctx.Err()
}

// residentEvicted records, in the background, that the resident level
// dropped cubes' packs for room (slots.Resident's evicted hook: it runs
// under the slot pool's lock); they come back at a later tick when room
// allows.
func (p *Pipeline) residentEvicted(cubes []string) {
	go func() {
		for _, c := range cubes {
			if err := p.tiers.SetResident(p.base, c, "", false, "room"); err != nil && p.base.Err() == nil {
				p.log.Warn("resident eviction not recorded", "cube", c, "err", err)
			}
		}
	}()
}

// clearSeq empties a sequence (an idle slot's, evicted for room).
func (l *loaded) clearSeq(seq int) { l.eng.ClearSeq(seq) }

// reserveJob is TierOptions.Reserve: a tier job's cells come out of the
// same KV budget as requests' (idle slots emptied first); when they are
// busy the job waits for a later tick.
func (p *Pipeline) reserveJob(ctx context.Context, cells int, wait bool) (func(), error) {
	// jobs run with the scheduler attached to the primary's engine (under
	// the scheduler's job lock, which SetEngine takes before an unload)
	l := p.jobL.Load()
	if l == nil {
		return nil, fmt.Errorf("%w: the model is not loaded", scheduler.ErrDeferred)
	}
	if l.noJobSeq {
		err := fmt.Errorf("%w: the model is loaded with one sequence (OneSequence), a request's: a tier job needs one of its own", ErrBadOptions)
		if !wait {
			err = fmt.Errorf("%w: %w", scheduler.ErrDeferred, err) // pending, for a process that has one
		}
		return nil, err
	}
	if !wait {
		release, err := l.pool.ReserveNow(l.jobSlot, cells, l.eng.NCtx(), l.res, l.clearSeq)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", scheduler.ErrDeferred, err)
		}
		return release, nil
	}
	if _, err := l.pool.Admit(ctx, l.jobSlot, cells, cells, l.eng.NCtx(), l.res, l.clearSeq); err != nil {
		return nil, err
	}
	return func() { l.pool.Unreserve(l.jobSlot) }, nil
}

// tierAdapters is TierOptions.Adapters: the adapter set a request of cube
// naming no adapters runs under (Pipeline.adapters with nil specs: the cube's
// default adapters at scale 1, none when the model was loaded without LoRA
// support), on the model tier jobs use. Errors: ErrDeferred (wrapped)
// while no model is loaded; lora errors (an adapter file changed or gone).
func (p *Pipeline) tierAdapters(ctx context.Context, cube string) (scheduler.AdapterSet, error) {
	l := p.jobL.Load()
	if l == nil {
		return scheduler.AdapterSet{}, fmt.Errorf("%w: the model is not loaded", scheduler.ErrDeferred)
	}
	ad, err := p.adapters(ctx, l, cube, nil)
	if err != nil {
		return scheduler.AdapterSet{}, err
	}
	return scheduler.AdapterSet{Refs: ad.refs, Key: ad.key, Release: ad.release}, nil
}
