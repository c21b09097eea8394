package memosrt

import (
	"context"

	"github.com/memosrt/memosrt/cubeops"
	"github.com/memosrt/memosrt/internal/gate"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/pipeline"
	"github.com/memosrt/memosrt/scheduler"
)

type (
	// PackStatus is a cube's activation tier: its stored packs and its
	// resident pack.
	PackStatus = pipeline.PackStatus
	// ResidentStatus is a pack held at the resident level.
	ResidentStatus = pipeline.ResidentStatus
	// WarmOptions tune Warm.
	WarmOptions = pipeline.WarmOptions
	// Budgets are the OS's budgets and what is used of each.
	Budgets = pipeline.Budgets
	// AdapterStatus is a registered LoRA adapter and whether it is loaded.
	AdapterStatus = pipeline.AdapterStatus
)

// Packs reports cube's packs, oldest first, and its resident state.
// Errors: ErrClosed.
func (o *OS) Packs(ctx context.Context, cube string) (PackStatus, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (PackStatus, error) { return o.p.Packs(cube), nil })
}

// AllPacks lists every stored pack of every cube (labels: the cube for
// tier packs, "conv:<cube>" for conversation packs). Errors: ErrClosed.
func (o *OS) AllPacks(ctx context.Context) ([]kvcache.Info, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]kvcache.Info, error) { return o.kv.List(""), nil })
}

// Warm puts cube's memories into the activation tier now: every memory
// but recorded chat turns joins the cube's pack while it fits the pack
// budget, pinned, and the pack's KV state is computed and stored; with
// Resident the pack is also made resident. The next request of the cube
// restores the pack instead of prefilling it. Errors: ErrUnknownCube,
// *FieldError for a cube without memories or Resident without resident
// sequences, scheduler.ErrKVBudget, ErrNoModel, ErrClosed.
func (o *OS) Warm(ctx context.Context, cube string, wo WarmOptions) (PackStatus, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (PackStatus, error) { return cubeops.Warm(ctx, o.stores(), cube, wo) })
}

// ChunkResult reports MakeChunks.
type ChunkResult = pipeline.ChunkResult

// MakeChunks computes the KV chunks of cube's memories ids (every memory
// but recorded chat turns when ids is empty) now, waiting for them; chat
// turns retrieving them compose the chunks from then on (Options.Compose).
// Ticks make them by retrievals anyway (Options.ChunkAfterUses). Errors:
// *FieldError with composition off, ErrUnknownCube, textmem.ErrNotFound,
// ErrBusy, ErrClosed.
func (o *OS) MakeChunks(ctx context.Context, cube string, ids []string) (ChunkResult, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (ChunkResult, error) { return o.p.MakeChunks(ctx, cube, ids) })
}

// Tiers returns cube's tier state: each memory's tier and heat, the pack
// and its level, pending jobs, budgets, and the last limit transitions
// (all if limit <= 0). Recorded usage is written first.
func (o *OS) Tiers(ctx context.Context, cube string, limit int) (scheduler.CubeTiers, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (scheduler.CubeTiers, error) { return o.p.Tiers(ctx, cube, limit) })
}

// Budgets reports every budget of the OS and its use now. Errors:
// ErrClosed, storage errors.
func (o *OS) Budgets(ctx context.Context) (Budgets, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (Budgets, error) { return o.p.Budgets(ctx) })
}

// Adapters lists cube's registered adapters ("" all) with whether each is
// loaded and how many requests hold it. Errors: ErrClosed, storage errors.
func (o *OS) Adapters(ctx context.Context, cube string) ([]AdapterStatus, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]AdapterStatus, error) { return o.p.Adapters(ctx, cube) })
}

// Kick asks the background loop for a tick soon (after a burst of usage, a
// deleted memory). A no-op without the loop.
func (o *OS) Kick() {
	if o.p != nil {
		o.p.Kick()
	}
}

// Tick runs one scheduler tick now: memories past their expiry are
// deleted (also without a model), recorded usage is written, tier moves
// are planned and run (promotions, demotions, pack refreshes; see
// scheduler.Tiers.Tick) and the resident level is set from pack heat. The
// background loop runs the same on its period. Errors: ErrNoModel, a
// failed job's error (it stays pending), ErrClosed, ctx's error.
func (o *OS) Tick(ctx context.Context) (scheduler.TickReport, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (scheduler.TickReport, error) {
		if err := o.conv.SweepExpired(ctx); err != nil {
			return scheduler.TickReport{}, err
		}
		return o.p.Tick(ctx, true)
	})
}
