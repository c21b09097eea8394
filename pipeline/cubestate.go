package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/memosrt/memosrt/cubearchive"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/pipeline/convpack"
	"github.com/memosrt/memosrt/textmem"
)

// DropCube deletes what the pipeline derived from cube, after its
// memories are deleted: its tier state, its stored packs and the shared
// packs holding its memories (a pack write still to come skips itself), the sequences pooled for it and
// its resident pack. Errors: storage errors (repeat the call).
func (p *Pipeline) DropCube(ctx context.Context, cube string) error {
	// before the tiers' delete cancels a Promote of the cube: its Warm
	// sees the cube gone (and again below, for pack writes under kvMu)
	p.bumpGen(cube)
	if err := p.tiers.DeleteCube(ctx, cube); err != nil {
		return err
	}
	p.kvMu.Lock()
	p.bumpGen(cube)
	for _, pk := range p.CubePacks(cube) {
		if err := p.kv.Delete(pk.ID); err != nil && !errors.Is(err, kvcache.ErrNotFound) {
			p.kvMu.Unlock()
			return err
		}
	}
	if err := p.dropShared(cube); err != nil {
		p.kvMu.Unlock()
		return err
	}
	p.kvMu.Unlock()
	p.eachLoaded(func(l *loaded) {
		l.pool.Forget(cube, l.clearSeq)
		l.pool.ForgetIf(func(scope string) bool { return convpack.ScopeReads(scope, cube) }, l.clearSeq)
		l.res.Drop(cube)
	})
	return nil
}

// DropPacksBefore deletes cube's stored packs created before t: a cube
// made again under the same name (t its record's creation) does not reuse
// the packs of the one before.
func (p *Pipeline) DropPacksBefore(cube string, t time.Time) {
	p.kvMu.Lock()
	defer p.kvMu.Unlock()
	for _, pk := range p.CubePacks(cube) {
		if pk.Created.Before(t) {
			_ = p.kv.Delete(pk.ID)
		}
	}
}

// PackCubes returns the cubes that stored packs belong to, sorted.
func (p *Pipeline) PackCubes() []string {
	var names []string
	for _, pk := range p.kv.List("") {
		c := strings.TrimPrefix(pk.Label, convpack.Prefix)
		if cube, _, ok := ChunkOf(pk.Label); ok {
			c = cube
		}
		if textmem.ValidCube(c) && !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	slices.Sort(names)
	return names
}

// CubePacks returns the stored packs of cube: its tier packs, its
// conversation packs and its memory chunks.
func (p *Pipeline) CubePacks(cube string) []kvcache.Info {
	out := append(p.kv.List(cube), p.kv.List(convpack.Label(cube))...)
	for _, pk := range p.kv.List("") {
		if c, _, ok := ChunkOf(pk.Label); ok && c == cube {
			out = append(out, pk)
		}
	}
	return out
}

// ImportPack stores an exported pack's blob (kvcache.Encode's form) as a
// pack of cube: a conversation pack stays one, any other becomes a tier
// pack of cube, found by cube's lookups only. Errors: cubearchive.ErrBad
// wrapping the decode error (name is the archive entry), storage errors.
func (p *Pipeline) ImportPack(ctx context.Context, cube, name string, blob []byte) error {
	hd, state, err := kvcache.Decode(blob)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", cubearchive.ErrBad, name, err)
	}
	if _, _, ok := ChunkOf(hd.Label); ok {
		return nil // memory chunks are computed again here, by heat
	}
	if strings.HasPrefix(hd.Label, convpack.Prefix) {
		hd.Label = convpack.Label(cube)
	} else {
		hd.Label = cube
	}
	hd.Scope = cube // found by this cube's lookups only (never the exporter's)
	hd.Created = time.Time{}
	p.kvMu.Lock()
	defer p.kvMu.Unlock()
	_, err = p.kv.Put(ctx, hd, state)
	return err
}

// ImportTiers makes ids cube's tier members again (pins: pinned ones;
// resident: its pack wanted resident), as an export recorded them: the
// tier pack is computed with the primary, loaded for it. Without a
// served model it does nothing. Errors as Use, scheduler.Tiers.Promote's.
func (p *Pipeline) ImportTiers(ctx context.Context, cube string, ids, pins []string, resident bool) error {
	if p.models.Len() == 0 {
		return nil
	}
	_, release, err := p.use(ctx, "", nil)
	if err != nil {
		return err
	}
	defer release()
	p.kvMu.Lock()
	defer p.kvMu.Unlock()
	_, err = p.tiers.Promote(ctx, cube, ids, "import", false, resident)
	if err == nil && len(pins) > 0 {
		_, err = p.tiers.Promote(ctx, cube, pins, "import", true, resident)
	}
	return err
}

// gen returns cube's deletion count (see Pipeline.gens).
func (p *Pipeline) gen(cube string) uint64 {
	p.genMu.Lock()
	defer p.genMu.Unlock()
	return p.gens[cube]
}

func (p *Pipeline) bumpGen(cube string) {
	p.genMu.Lock()
	defer p.genMu.Unlock()
	if p.gens == nil {
		p.gens = map[string]uint64{}
	}
	p.gens[cube]++
}

// TierMembership is cube's tier members, those pinned, and whether its
// pack is wanted resident (scheduler.Tiers.Membership).
func (p *Pipeline) TierMembership(cube string) (members, pinned []string, resident bool, err error) {
	return p.tiers.Membership(cube)
}

// CheckCube returns nil for "" or an existing cube; a *errkind.FieldError
// for a name that is not a cube name, textmem.ErrUnknownCube for one that
// does not exist.
func (p *Pipeline) CheckCube(ctx context.Context, cube string) error {
	_, err := p.cubeOf(ctx, cube)
	return err
}
