package pipeline

import (
	"context"

	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/memchunk"
)

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
