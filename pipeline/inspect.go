package pipeline

import (
	"context"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/memchunk"
	"github.com/memosrt/memosrt/scheduler"
)

// packLevels gives each of packs its activation level (PackStatus.Levels):
// resident for the pack whose id is resident ("" for none), else ram when
// its decompressed state is in the RAM LRU, else disk.
func packLevels(packs []kvcache.Info, resident string) map[string]string {
	out := make(map[string]string, len(packs))
	for _, p := range packs {
		switch {
		case p.ID == resident:
			out[p.ID] = scheduler.LevelResident
		case p.InRAM:
			out[p.ID] = scheduler.LevelRAM
		default:
			out[p.ID] = scheduler.LevelDisk
		}
	}
	return out
}

// Budgets are the OS's bounds next to what uses them now: what the
// playground page (serve's /ui) shows in its header. Bytes unless the name
// says cells.
type Budgets struct {
	TierKVBytes    int64 `json:"tier_kv_bytes"`         // committed tier packs of all cubes, decompressed KV bytes
	TierKVBudget   int64 `json:"tier_kv_budget"`        // scheduler.Options.KVBytes (Options.Tiers)
	ChunkBytes     int64 `json:"chunk_bytes"`           // memory chunks of all cubes, decompressed KV bytes (new chunks count them against TierKVBudget)
	RAMBytes       int64 `json:"ram_bytes"`             // decompressed pack states in the kvcache RAM LRU
	RAMBudget      int64 `json:"ram_budget"`            // Options.RAMBytes
	ConvBytes      int64 `json:"conv_bytes"`            // stored conversation packs, blob bytes
	ConvBudget     int64 `json:"conv_budget"`           // Options.ConvBytes
	ResidentCells  int   `json:"resident_cells"`        // cells of n_ctx held by resident packs
	ResidentBudget int   `json:"resident_cells_budget"` // Options.ResidentCells
	AdapterBytes   int64 `json:"adapter_bytes"`         // loaded adapters' tensor bytes
	AdapterBudget  int64 `json:"adapter_budget"`        // Options.AdapterBytes
}

// Budgets reports each budget and its use now. Errors: ErrClosed, or the
// scheduler's store error.
func (p *Pipeline) Budgets(ctx context.Context) (Budgets, error) {
	st := p.Stats()
	b := Budgets{RAMBytes: st.KVRAMBytes, RAMBudget: p.opts.RAMBytes, ConvBytes: st.ConvBytes, ConvBudget: p.opts.ConvBytes,
		ResidentCells: st.ResidentCells, ResidentBudget: st.ResidentMax, AdapterBudget: p.opts.AdapterBytes}
	p.eachLoaded(func(l *loaded) {
		_, n := l.man.Loaded()
		b.AdapterBytes += n
	})
	for _, pk := range memchunk.List(p.kv, "") {
		b.ChunkBytes += pk.RawBytes
	}
	var err error
	b.TierKVBytes, b.TierKVBudget, err = p.tiers.KVUse()
	return b, err
}

// AdapterStatus is an adapter visible from a cube (the parametric tier)
// and whether it is loaded now.
type AdapterStatus struct {
	lora.Record
	Loaded bool `json:"loaded"`
	Refs   int  `json:"refs"` // requests holding it now
}

// Adapters lists the adapters visible from cube, by name: the cube's own,
// then global ones it does not shadow (cube "" lists global adapters).
// Errors: ErrClosed, lora.ErrBadName for a bad cube name.
func (p *Pipeline) Adapters(ctx context.Context, cube string) ([]AdapterStatus, error) {
	recs, err := p.reg.List(ctx, cube)
	if err != nil {
		return nil, err
	}
	live := map[string]lora.Loaded{}
	p.eachLoaded(func(l *loaded) {
		ls, _ := l.man.Loaded()
		for _, x := range ls {
			if y, ok := live[x.Name]; ok {
				x.Refs += y.Refs
			}
			live[x.Name] = x
		}
	})
	out := make([]AdapterStatus, 0, len(recs))
	for _, r := range recs {
		l, ok := live[r.RefName()]
		out = append(out, AdapterStatus{Record: r, Loaded: ok, Refs: l.Refs})
	}
	return out, nil
}
