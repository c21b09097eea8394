package cubeops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/memosrt/memosrt/accesskey"
	"github.com/memosrt/memosrt/cubearchive"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/pipeline"
	"github.com/memosrt/memosrt/textmem"
)

// Stores are what an export reads and an import writes.
type Stores struct {
	Mem      *textmem.Store
	Cubes    *textmem.CubeRegistry
	KV       *kvcache.Cache
	Pipeline *pipeline.Pipeline // packs, tier state and membership, pooled sequences
	Keys     *accesskey.Store
	// Shared: the text tier is a shared store (memosrt.Options.TextStore),
	// which deletes a cube's record with its memories.
	Shared bool
	Log    *slog.Logger
	// Key is the data directory's encryption key: archives are sealed
	// under a key derived from it; nil: plain archives.
	Key []byte
	// Now is a hook: the clock of the export time.
	Now func() time.Time
	// AfterTextDelete is a hook, a failpoint for tests: it runs in Delete
	// between the text delete and the rest. nil: none.
	AfterTextDelete func(cube string)
	// DB is the data directory: Delete, Drop, Resync and Import, which
	// commit in several transactions, hold its backups' snapshot off for
	// their whole run (datadir.DB.HoldBackup), so that a backup holds each
	// whole or not at all. nil: no hold.
	DB *datadir.DB
	// Deleting is the set of cubes being deleted, the OS's own, shared by
	// the Stores it lends (Warm reads it). nil: none tracked.
	Deleting *Deleting
}

// hold begins o.DB's backup hold and returns its release (a no-op
// without one). Holds do not nest: an operation here that holds calls
// only unheld ones (Import deletes through deleteCube, not Delete).
func (o Stores) hold() (release func()) {
	if o.DB == nil {
		return func() {}
	}
	return o.DB.HoldBackup()
}

// Export writes cube as one archive (package cubearchive's layout) to
// w: its record, memories in canonical order, KV pack blobs and activation
// tier membership. With Options.EncryptionKey the archive is sealed
// (AES-256-GCM records under a key derived from it), and only an OS opened
// with the same key imports it. Errors: textmem.ErrUnknownCube, storage errors,
// w's errors (part of the archive may have been written).
func Export(ctx context.Context, o Stores, cube string, w io.Writer) error {
	rec, err := o.Cubes.Get(ctx, cube)
	if err != nil {
		return err
	}
	mems, err := o.Mem.List(ctx, cube)
	if err != nil {
		return err
	}
	members, pinned, resident, err := o.Pipeline.TierMembership(cube)
	if err != nil {
		return err
	}
	man := cubearchive.Manifest{Cube: rec.Name, Description: rec.Description, Metadata: rec.Metadata, Assistant: rec.Assistant,
		Created: rec.Created, Exported: o.Now().UTC(), TierMembers: members, Pinned: pinned, Resident: resident}
	var blobs [][]byte
	for _, p := range o.Pipeline.CubePacks(cube) {
		b, err := o.KV.Blob(p.ID)
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
	return cubearchive.Write(w, o.Key, man, mems, blobs)
}

// Result reports an Import.
type Result struct {
	Cube     string `json:"cube"`
	Memories int    `json:"memories"`
	Packs    int    `json:"packs"`
}

// Options tune Import.
type Options struct {
	// Cube imports under this name instead of the archive's.
	Cube string
	// Replace replaces an existing cube of that name; otherwise that is
	// textmem.ErrCubeExists.
	Replace bool
}

// Import reads a cube archive (Export's) from r. It stores the
// memories as they were (textmem.Store.Import: the same ids, creation and
// update times and versions, so clients' references stay valid and the
// cube's pack renders to the same tokens), stores each pack blob after
// checking it (packs computed for another model or KV layout are stored too
// but only ever match under their own config), and, with a model loaded,
// puts the memories that were in the activation tier (tier_members,
// pinned) back into it: their stored pack is found and nothing is decoded
// again. A failed import leaves no part of the cube behind. Errors:
// cubearchive.ErrBad (wrapping r's error when reading failed), textmem.ErrCubeExists,
// *FieldError for a bad name, storage errors.
func Import(ctx context.Context, o Stores, r io.Reader, opts Options) (Result, error) {
	defer o.hold()()
	var res Result
	ar, err := cubearchive.NewReader(r, o.Key)
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
		return res, &errkind.FieldError{Field: "cube", Msg: fmt.Sprintf("%q is not a cube name", cube)}
	}
	res.Cube = cube
	if ok, err := o.Cubes.Exists(ctx, cube); err != nil {
		return res, err
	} else if ok {
		if !opts.Replace {
			return res, fmt.Errorf("%w: %q (import with Options.Replace, or under another name with Options.Cube)", textmem.ErrCubeExists, cube)
		}
		if err := deleteCube(ctx, o, cube); err != nil {
			return res, err
		}
	}
	if _, err := o.Cubes.Create(ctx, textmem.Cube{Name: cube, Description: man.Description, Metadata: man.Metadata, Assistant: man.Assistant}); err != nil {
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
		if err := deleteCube(bg, o, cube); errors.Is(err, textmem.ErrUnknownCube) {
			for id := range imported {
				_ = o.Mem.Delete(bg, cube, id)
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
		got, err := o.Mem.Import(ctx, cube, m)
		if errors.Is(err, textmem.ErrBadID) || errors.Is(err, textmem.ErrIDExists) {
			return res, fmt.Errorf("%w: memories.jsonl line %d: %v", cubearchive.ErrBad, res.Memories+1, err)
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
		if err := o.Pipeline.ImportPack(ctx, cube, name, blob); err != nil {
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
		if err := o.Pipeline.ImportTiers(ctx, cube, ids, pins, man.Resident); err != nil {
			return res, err
		}
	}
	ok = true
	return res, nil
}
