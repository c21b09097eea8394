package memosrt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/memosrt/memosrt/cubearchive"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/textmem"
)

// ArchiveVersion is the cube archive format version ExportCube writes and
// the only one ImportCube reads (package cubearchive has the layout).
const ArchiveVersion = cubearchive.Version

// ExportCube writes cube as one archive (package cubearchive's layout) to
// w: its record, memories in canonical order, KV pack blobs and activation
// tier membership. With Options.EncryptionKey the archive is sealed
// (AES-256-GCM records under a key derived from it), and only an OS opened
// with the same key imports it. Errors: ErrUnknownCube, storage errors,
// w's errors (part of the archive may have been written).
func (o *OS) ExportCube(ctx context.Context, cube string, w io.Writer) error {
	if err := o.enter(); err != nil {
		return err
	}
	defer o.leave()
	rec, err := o.cubes.Get(ctx, cube)
	if err != nil {
		return err
	}
	mems, err := o.mem.List(ctx, cube)
	if err != nil {
		return err
	}
	members, pinned, resident, err := o.p.TierMembership(cube)
	if err != nil {
		return err
	}
	man := cubearchive.Manifest{Cube: rec.Name, Description: rec.Description, Metadata: rec.Metadata,
		Created: rec.Created, Exported: o.opts.Clock.Now().UTC(), TierMembers: members, Pinned: pinned, Resident: resident}
	var blobs [][]byte
	for _, p := range o.p.CubePacks(cube) {
		b, err := o.kv.Blob(p.ID)
		if errors.Is(err, kvcache.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return err
		}
		man.Packs = append(man.Packs, cubearchive.Pack{ID: p.ID, Label: p.Label, NTokens: p.NTokens})
		blobs = append(blobs, b)
	}
	// encrypted at rest, encrypted in transit: the archive is sealed under
	// the data directory's key
	return cubearchive.Write(w, o.opts.EncryptionKey, man, mems, blobs)
}

// ImportResult reports an ImportCube.
type ImportResult struct {
	Cube     string `json:"cube"`
	Memories int    `json:"memories"`
	Packs    int    `json:"packs"`
}

// ImportOptions tune ImportCube.
type ImportOptions struct {
	// Cube imports under this name instead of the archive's.
	Cube string
	// Replace replaces an existing cube of that name; otherwise that is
	// ErrCubeExists.
	Replace bool
}

// ImportCube reads a cube archive (ExportCube's) from r. It stores the
// memories as they were (textmem.Store.Import: the same ids, creation and
// update times and versions, so clients' references stay valid and the
// cube's pack renders to the same tokens), stores each pack blob after
// checking it (packs computed for another model or KV layout are stored too
// but only ever match under their own config), and, with a model loaded,
// puts the memories that were in the activation tier (tier_members,
// pinned) back into it: their stored pack is found and nothing is decoded
// again. A failed import leaves no part of the cube behind. Errors:
// ErrBadArchive (wrapping r's error when reading failed), ErrCubeExists,
// *FieldError for a bad name, storage errors.
func (o *OS) ImportCube(ctx context.Context, r io.Reader, opts ImportOptions) (ImportResult, error) {
	var res ImportResult
	if err := o.enter(); err != nil {
		return res, err
	}
	defer o.leave()
	ar, err := cubearchive.NewReader(r, o.opts.EncryptionKey)
	if errors.Is(err, cubearchive.ErrNeedKey) {
		return res, fmt.Errorf("%w: import it into a data directory opened with the key it was exported under", err)
	}
	if err != nil {
		return res, err
	}
	man := ar.Manifest()
	cube := man.Cube
	if opts.Cube != "" {
		cube = opts.Cube
	}
	if !textmem.ValidCube(cube) {
		return res, badField("cube", "%q is not a cube name", cube)
	}
	res.Cube = cube
	if ok, err := o.cubes.Exists(ctx, cube); err != nil {
		return res, err
	} else if ok {
		if !opts.Replace {
			return res, fmt.Errorf("%w: %q (import with ImportOptions.Replace, or under another name with ImportOptions.Cube)", ErrCubeExists, cube)
		}
		if err := o.deleteCube(ctx, cube); err != nil {
			return res, err
		}
	}
	if _, err := o.cubes.Create(ctx, cubeRecord{Name: cube, Description: man.Description, Metadata: man.Metadata}); err != nil {
		return res, err
	}
	ok := false
	imported := map[string]bool{}
	defer func() {
		if ok {
			return
		}
		// never leave half a cube: delete it, or, when it is gone already
		// (deleted on another node meanwhile), the memories stored here
		bg := context.WithoutCancel(ctx)
		if err := o.deleteCube(bg, cube); errors.Is(err, ErrUnknownCube) {
			for id := range imported {
				_ = o.mem.Delete(bg, cube, id)
			}
		}
	}()
	for {
		m, err := ar.NextMemory()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		got, err := o.mem.Import(ctx, cube, m)
		if errors.Is(err, textmem.ErrBadID) || errors.Is(err, textmem.ErrIDExists) {
			return res, fmt.Errorf("%w: memories.jsonl line %d: %v", ErrBadArchive, res.Memories+1, err)
		}
		if err != nil {
			return res, err
		}
		imported[got.ID] = true
		res.Memories++
	}
	for {
		name, blob, err := ar.NextPack()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, err
		}
		if err := o.p.ImportPack(ctx, cube, name, blob); err != nil {
			return res, err
		}
		res.Packs++
	}
	var ids, pins []string
	for _, id := range man.TierMembers { // none: no tier pack to make
		if imported[id] {
			ids = append(ids, id)
			if slices.Contains(man.Pinned, id) {
				pins = append(pins, id)
			}
		}
	}
	if len(man.TierMembers) > 0 {
		if err := o.p.ImportTiers(ctx, cube, ids, pins, man.Resident); err != nil {
			return res, err
		}
	}
	ok = true
	return res, nil
}
