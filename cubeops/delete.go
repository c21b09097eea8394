package cubeops

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/memosrt/memosrt/textmem"
)

// Delete removes cube and everything derived from it: memories and their
// vectors (the text tier), packs, tier state, resident state, pooled
// sequences' reuse (pipeline.Pipeline.DropCube), access keys, and the
// record. Errors: textmem.ErrUnknownCube, storage errors (repeat the call:
// a delete cut short leaves part of the cube).
func Delete(ctx context.Context, o Stores, cube string) error {
	defer o.hold()()
	return deleteCube(ctx, o, cube)
}

// deleteCube is Delete without its hold (Import, which holds, calls it).
func deleteCube(ctx context.Context, o Stores, cube string) error {
	// marked before the memories go, until the record has gone too (Warm)
	defer o.Deleting.begin(cube)()
	if _, err := o.Cubes.Get(ctx, cube); err != nil {
		return err
	}
	if err := o.Mem.DeleteCube(ctx, cube); err != nil {
		return err
	}
	if o.AfterTextDelete != nil {
		o.AfterTextDelete(cube)
	}
	if err := drop(ctx, o, cube, time.Time{}); err != nil {
		return err
	}
	if o.Shared {
		// the shared store took the record with the texts, in one
		// transaction; removing it again would hide a memory another node
		// added since (its add made the record anew)
		return nil
	}
	return o.Cubes.Remove(ctx, cube)
}

// Drop deletes what this node derived from cube, after its memories are
// deleted by another node sharing the text store: the pipeline's state of
// it, and the access keys' grants on it, but for those on a cube made
// again under the name since (the shared store has its record now).
func Drop(ctx context.Context, o Stores, cube string) error {
	defer o.hold()()
	var keep time.Time
	rec, err := o.Cubes.Get(ctx, cube)
	switch {
	case err == nil:
		keep = rec.Created
	case !errors.Is(err, textmem.ErrUnknownCube):
		return err
	}
	return drop(ctx, o, cube, keep)
}

// drop is Drop keeping the grants on the cube created at keep (zero: none).
func drop(ctx context.Context, o Stores, cube string, keep time.Time) error {
	if err := o.Pipeline.DropCube(ctx, cube); err != nil {
		return err
	}
	_, err := o.Keys.DropCube(ctx, cube, keep)
	return err
}

// Resync drops this node's state of every cube the shared text store no
// longer has a record of (deleted by another node while this one did not
// hear it: down, or its listening connection lost), and the packs of a
// cube made again under the same name since. A store that does not
// answer leaves the state as it is; failures are logged.
func Resync(ctx context.Context, o Stores) {
	defer o.hold()()
	names, err := o.Keys.Cubes(ctx)
	if err != nil {
		o.Log.Warn("resync of cubes: access keys", "err", err)
	}
	for _, c := range o.Pipeline.PackCubes() {
		if !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	for _, c := range names {
		rec, err := o.Cubes.Get(ctx, c)
		if err == nil {
			// made again under the same name since: this node's packs of
			// the one before are another cube's
			o.Pipeline.DropPacksBefore(c, rec.Created)
		}
		if !errors.Is(err, textmem.ErrUnknownCube) {
			continue
		}
		o.Log.Info("dropping a cube deleted on another node", "cube", c)
		if err := drop(ctx, o, c, time.Time{}); err != nil {
			o.Log.Warn("dropping a cube deleted on another node", "cube", c, "err", err)
		}
	}
}
