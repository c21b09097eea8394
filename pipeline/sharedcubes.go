package pipeline

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/layout"
	"github.com/memosrt/memosrt/textmem"
)

// MaxCubes is the most cubes one request may name: its own (Request.Cube)
// and the ones it reads (Request.ReadCubes) together.
const MaxCubes = 8

// sharedPrefix starts the label of every shared pack: the KV state of a
// prompt's preamble and its read cubes' packs (Request.ReadCubes), stored
// under their composite scope so that another request naming the same
// read cubes restores it. The label is sharedPrefix + the cubes joined by
// "+" (a character no cube name has).
const sharedPrefix = "shared:"

// checkReadCubes validates req.ReadCubes: each a cube name of an existing
// cube, not req.Cube, at most MaxCubes in all; names given twice are kept
// once, in the order first given. It returns their deletion counts, in
// the same order (read before the cube check, as validate does for Cube).
// Errors: *FieldError naming "cubes", textmem.ErrUnknownCube.
func (p *Pipeline) checkReadCubes(ctx context.Context, req *Request) ([]uint64, error) {
	if len(req.ReadCubes) == 0 {
		return nil, nil
	}
	if req.Cube == "" {
		return nil, badField("cubes", "cubes to read need a cube to write (the first cube named)")
	}
	var names []string
	for _, c := range req.ReadCubes {
		if !textmem.ValidCube(c) {
			return nil, badField("cubes", "%q is not a cube name (1..64 of [A-Za-z0-9._-], not . or ..)", c)
		}
		if c != req.Cube && !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	if len(names)+1 > MaxCubes {
		return nil, badField("cubes", "%d cubes named, at most %d", len(names)+1, MaxCubes)
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

// sharedScope is the kvcache scope of the shared packs of cubes at their
// deletion counts gens: the names and counts joined, so that a pack is
// found only by requests that name the same cubes in the same order, and
// never after one of them was deleted. "" for no cubes.
func sharedScope(cubes []string, gens []uint64) string {
	if len(cubes) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(sharedPrefix)
	for i, c := range cubes {
		if i > 0 {
			b.WriteByte('+')
		}
		b.WriteString(c + "@" + strconv.FormatUint(gens[i], 10))
	}
	return b.String()
}

// scopeReads reports whether a slot scope holds state of cube as a read
// cube (the sharedScope part admit appends to it).
func scopeReads(scope, cube string) bool {
	_, shared, ok := strings.Cut(scope, "\x00"+sharedPrefix)
	if !ok {
		return false
	}
	for _, part := range strings.Split(shared, "+") {
		if name, _, _ := strings.Cut(part, "@"); name == cube {
			return true
		}
	}
	return false
}

// sharedLabel is the label of the shared packs of cubes.
func sharedLabel(cubes []string) string { return sharedPrefix + strings.Join(cubes, "+") }

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
	snap, err := p.kv.Snapshot(l.eng, sl.Seq, kvcache.Header{AdapterKey: t.ad.key, Tokens: slices.Clone(sl.Toks()), Label: sharedLabel(t.req.ReadCubes), Scope: t.shared})
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
		p.trimConv(info.ID)
	}()
}

// dropShared deletes the shared packs whose cubes include cube. Called
// with kvMu held.
func (p *Pipeline) dropShared(cube string) error {
	for _, pk := range p.kv.List("") {
		names, ok := strings.CutPrefix(pk.Label, sharedPrefix)
		if !ok || !slices.Contains(strings.Split(names, "+"), cube) {
			continue
		}
		if err := p.kv.Delete(pk.ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			return err
		}
	}
	return nil
}
