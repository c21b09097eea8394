package pipeline

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/pipeline/convpack"
	"github.com/memosrt/memosrt/pipeline/request"
)

// checkReadCubes validates req.ReadCubes (request.ReadCubes): each a cube
// name of an existing cube, not req.Cube, at most MaxCubes in all; names
// given twice are kept once, in the order first given. It returns their
// deletion counts, in the same order (read before the cube check, as
// validate does for Cube). Errors: *FieldError naming "cubes",
// textmem.ErrUnknownCube.
func (p *Pipeline) checkReadCubes(ctx context.Context, req *Request) ([]uint64, error) {
	if len(req.ReadCubes) == 0 {
		return nil, nil
	}
	names, err := request.ReadCubes(req)
	if err != nil {
		return nil, err
	}
	gens := make([]uint64, len(names))
	for i, c := range names {
		gens[i] = p.gen(c)
		if _, err := p.cubeOf(ctx, c); err != nil {
			return nil, err
		}
	}
	req.ReadCubes = names
	return gens, nil
}

// sharedInput returns the read cubes of req with their pack candidates
// (Tiers.HotSet), for layout.Input.Shared.
func (p *Pipeline) sharedInput(ctx context.Context, req *Request) ([]layout.SharedCube, error) {
	var out []layout.SharedCube
	for _, c := range req.ReadCubes {
		members, err := p.tiers.HotSet(ctx, c)
		if err != nil {
			return nil, err
		}
		out = append(out, layout.SharedCube{Cube: c, Members: members})
	}
	return out, nil
}

// persistShared stores the prompt's shared prefix (the preamble and the
// read cubes' pack members, Prompt.SharedTokens) as a shared pack under
// the read cubes' scope, unless one is stored already: the state is cut
// from the slot's sequence now and stored in the background, as persist
// does. The written cube's part never enters it, so a request that names
// the same read cubes for another cube may restore it.
func (p *Pipeline) persistShared(t *turn) {
	n := t.r.prompt.SharedTokens
	if t.shared == "" || t.r.prompt.SharedPack == 0 || n == 0 || t.req.NoPersist || p.opts.NoPersist || t.held < n || t.background {
		return
	}
	l, sl := t.l, t.sl
	toks := slices.Clone(t.r.toks[:n])
	if !slices.Equal(sl.Toks()[:n], toks) {
		return
	}
	key := kvcache.ScopedKey(t.ad.cfgKey, t.shared)
	if m := p.kv.Lookup(key, toks); m.Tokens >= n {
		return // stored already (by this turn's cube or another)
	}
	select {
	case p.writeSem <- struct{}{}:
	default:
		return // writes busy: a later turn stores it
	}
	snap, err := p.kv.Snapshot(l.eng, sl.Seq, kvcache.Header{AdapterKey: t.ad.key, Tokens: slices.Clone(sl.Toks()), Label: convpack.SharedLabel(t.req.ReadCubes), Scope: t.shared})
	if err == nil {
		snap, err = snap.Prefix(n)
	}
	if err != nil {
		<-p.writeSem
		p.log.Warn("shared pack not saved", "seq", sl.Seq, "err", err)
		return
	}
	cubes, gens := t.req.ReadCubes, t.readGens
	p.writes.Add(1)
	p.pending.Add(1)
	go func() {
		defer func() { p.pending.Add(-1); <-p.writeSem; p.writes.Done() }()
		p.kvMu.Lock()
		defer p.kvMu.Unlock()
		for i, c := range cubes {
			if p.gen(c) != gens[i] {
				return // a read cube was deleted after the request began
			}
		}
		info, err := snap.Store(context.Background())
		if err != nil {
			p.log.Warn("shared pack not stored", "cubes", strings.Join(cubes, ","), "err", err)
			return
		}
		p.log.Debug("shared pack stored", "cubes", strings.Join(cubes, ","), "pack", info.ID[:12], "n_tokens", info.NTokens)
		p.convEvicted.Add(convpack.Trim(p.kv, p.opts.ConvBytes, info.ID, p.log))
	}()
}

// dropShared deletes the shared packs whose cubes include cube. Called
// with kvMu held.
func (p *Pipeline) dropShared(cube string) error {
	for _, pk := range p.kv.List("") {
		names, ok := strings.CutPrefix(pk.Label, convpack.SharedPrefix)
		if !ok || !slices.Contains(strings.Split(names, "+"), cube) {
			continue
		}
		if err := p.kv.Delete(pk.ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			return err
		}
	}
	return nil
}
