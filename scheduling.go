package memosrt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/scheduler"
)

// addUses buffers uses and kicks the scheduler after TickAfterUses of them.
func (o *OS) addUses(uses []scheduler.Use) {
	if o.usage.Add(uses, o.opts.Clock.Now()) >= o.opts.TickAfterUses {
		o.Kick()
	}
}

// flushUsage writes the buffered uses (scheduler.UsageBuffer.Flush).
func (o *OS) flushUsage(ctx context.Context) error {
	if o.usage == nil {
		return nil
	}
	return o.usage.Flush(ctx, o.tiers)
}

// Kick asks the background loop for a tick soon (after a burst of usage, a
// deleted memory). A no-op without the loop.
func (o *OS) Kick() {
	select {
	case o.kick <- struct{}{}:
	default:
	}
}

// loop is the scheduler's background goroutine: it writes recorded usage
// every UsageFlush, runs a tick every Tiers.Interval and soon after a
// Kick, and the value-log GC every GCInterval. Jobs decode at background priority (runtime.Request.Background):
// foreground requests go first and a job yields between small batches.
func (o *OS) loop(ctx context.Context) {
	defer close(o.loopDone)
	interval := o.opts.Tiers.Interval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	flush := time.NewTicker(o.opts.UsageFlush)
	defer flush.Stop()
	gc := time.NewTicker(o.opts.GCInterval)
	defer gc.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-gc.C:
			start := time.Now()
			if n, err := o.db.Reclaim(); err != nil {
				o.log.Warn("value-log GC failed", "err", err)
			} else if ms := time.Since(start).Milliseconds(); n > 0 || ms >= 1000 {
				o.log.Info("value-log GC", "files_rewritten", n, "ms", ms)
			}
			continue
		case <-flush.C:
			if err := o.flushUsage(ctx); err != nil && ctx.Err() == nil {
				o.log.Warn("usage not recorded", "err", err)
			}
			continue
		case <-tick.C:
		case <-o.kick:
		}
		if err := o.conv.SweepExpired(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("expired memories not swept", "err", err)
		}
		if _, err := o.tick(ctx); err != nil && ctx.Err() == nil {
			o.log.Warn("tick failed", "err", err)
		}
	}
}

// Tick runs one scheduler tick now: it writes recorded usage, plans and
// runs tier moves (promotions, demotions, pack refreshes; see
// scheduler.Tiers.Tick) and then sets the resident level from pack heat.
// Memories past their expiry are deleted first (also without a model).
// The background loop runs the same on its period. Errors: ErrNoModel, a
// failed job's error (it stays pending), ctx's error.
func (o *OS) Tick(ctx context.Context) (scheduler.TickReport, error) {
	if err := o.enter(); err != nil {
		return scheduler.TickReport{}, err
	}
	defer o.leave()
	ctx, done := o.bound(ctx)
	defer done()
	if err := o.conv.SweepExpired(ctx); err != nil {
		return scheduler.TickReport{}, err
	}
	_, release, err := o.use(ctx, "", nil) // loaded for it, as a request would
	if err != nil {
		return scheduler.TickReport{}, err
	}
	defer release()
	return o.tick(ctx)
}

func (o *OS) tick(ctx context.Context) (scheduler.TickReport, error) {
	o.usage.ResetSince()
	if err := o.flushUsage(ctx); err != nil {
		return scheduler.TickReport{}, err
	}
	l, done := o.hold()
	defer done()
	if l == nil {
		return scheduler.TickReport{}, nil // unloaded: tier jobs wait for its next load
	}
	rep, err := o.tiers.Tick(ctx)
	if errors.Is(err, scheduler.ErrReadOnly) {
		return rep, nil // unloaded meanwhile
	}
	if rerr := o.applyResident(ctx, l); rerr != nil && err == nil {
		err = rerr
	}
	return rep, err
}

// applyResident sets the resident level from the tiers: pinned resident
// packs, then the hottest packs at or above ResidentAt, while resident
// sequences and ResidentCells last. Packs no longer wanted (cold, over
// budget, recomputed) leave it first.
func (o *OS) applyResident(ctx context.Context, l *loaded) error {
	nres := l.nres
	if nres == 0 {
		return nil
	}
	l.applyMu.Lock()
	defer l.applyMu.Unlock()
	hot, err := o.tiers.HotPacks(ctx)
	if err != nil {
		return err
	}
	want := map[string]scheduler.PackHeat{}
	cells := 0
	reason := map[string]string{}
	for _, p := range hot {
		why := "heat"
		if p.Resident {
			why = "pinned"
		} else if p.Heat < o.opts.ResidentAt {
			reason[p.Cube] = "cold"
			continue
		}
		if len(want) >= nres || cells+p.Tokens > o.opts.ResidentCells {
			reason[p.Cube] = "budget"
			continue
		}
		want[p.Cube], reason[p.Cube] = p, why
		cells += p.Tokens
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
		if err := o.tiers.SetResident(ctx, cube, "", false, why); err != nil {
			return err
		}
	}
	for cube, p := range want {
		if _, have := l.res.Get(cube); have {
			continue
		}
		if err := o.makeResident(ctx, l, cube, p.PackID); err != nil {
			o.log.Warn("pack not made resident", "cube", cube, "pack", p.PackID, "err", err)
			continue
		}
		if err := o.tiers.SetResident(ctx, cube, p.PackID, true, reason[cube]); err != nil {
			return err
		}
	}
	return nil
}

// makeResident restores stored pack id into a free resident sequence.
func (o *OS) makeResident(ctx context.Context, l *loaded, cube, id string) error {
	h, state, _, err := o.kv.State(id)
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
func (o *OS) residentEvicted(cubes []string) {
	go func() {
		for _, c := range cubes {
			if err := o.tiers.SetResident(o.base, c, "", false, "room"); err != nil && o.base.Err() == nil {
				o.log.Warn("resident eviction not recorded", "cube", c, "err", err)
			}
		}
	}()
}

// clearSeq empties a sequence (an idle slot's, evicted for room).
func (l *loaded) clearSeq(seq int) { l.eng.ClearSeq(seq) }

// reserveJob is TierOptions.Reserve: a tier job's cells come out of the
// same KV budget as requests' (idle slots emptied first); when they are
// busy the job waits for a later tick.
func (o *OS) reserveJob(ctx context.Context, cells int, wait bool) (func(), error) {
	// jobs run with the scheduler attached to the primary's engine (under
	// the scheduler's job lock, which SetEngine takes before an unload)
	l := o.jobL.Load()
	if l == nil {
		return nil, fmt.Errorf("%w: the model is not loaded", scheduler.ErrDeferred)
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
// naming no adapters runs under (OS.adapters with nil specs: the cube's
// default adapters at scale 1, none when the model was loaded without LoRA
// support), on the model tier jobs use. Errors: ErrDeferred (wrapped)
// while no model is loaded; lora errors (an adapter file changed or gone).
func (o *OS) tierAdapters(ctx context.Context, cube string) (scheduler.AdapterSet, error) {
	l := o.jobL.Load()
	if l == nil {
		return scheduler.AdapterSet{}, fmt.Errorf("%w: the model is not loaded", scheduler.ErrDeferred)
	}
	ad, err := o.adapters(ctx, l, cube, nil)
	if err != nil {
		return scheduler.AdapterSet{}, err
	}
	return scheduler.AdapterSet{Refs: ad.refs, Key: ad.key, Release: ad.release}, nil
}
