package accesskey

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/memosrt/memosrt/textmem"
)

// CubeRecords reads the record of a cube: its creation time binds a grant
// to the cube it was made for. *textmem.CubeRegistry implements it; Get
// returns an error wrapping textmem.ErrUnknownCube for a cube with no
// record.
type CubeRecords interface {
	Get(ctx context.Context, cube string) (textmem.Cube, error)
}

// Guard serves a Store's keys against the cubes they name and a clock:
// it binds each grant it makes to its cube as the cube is now, refuses
// expired keys, and refuses (and takes away) a grant whose cube was
// deleted since, perhaps made again under its name. It is what package
// memosrt's OS keys methods delegate to. Safe for concurrent use as its
// Store and CubeRecords are; it holds no state of its own.
type Guard struct {
	store *Store
	cubes CubeRecords
	now   func() time.Time
	log   *slog.Logger
}

// NewGuard returns a Guard over s and cubes, telling time with now and
// logging a grant it failed to take away to log.
func NewGuard(s *Store, cubes CubeRecords, now func() time.Time, log *slog.Logger) *Guard {
	return &Guard{store: s, cubes: cubes, now: now, log: log}
}

// Create is Store.Create with each grant's CubeCreated set from its
// cube's record (a grant with an invalid cube name is left for the spec's
// check to name). Errors: ErrBadSpec, the record's error for a cube
// without one (textmem.ErrUnknownCube naming it), storage errors.
func (g *Guard) Create(ctx context.Context, spec Spec) (Key, string, error) {
	spec.Grants = append([]Grant(nil), spec.Grants...)
	for i, gr := range spec.Grants {
		if !textmem.ValidCube(gr.Cube) {
			continue // the spec's check names it
		}
		rec, err := g.cubes.Get(ctx, gr.Cube)
		if err != nil {
			return Key{}, "", err
		}
		spec.Grants[i].CubeCreated = rec.Created
	}
	return g.store.Create(ctx, spec, g.now())
}

// Lookup is Store.Lookup refusing a key that has expired by the Guard's
// clock: an error wrapping ErrExpired naming the key and the time.
func (g *Guard) Lookup(ctx context.Context, token string) (Key, error) {
	k, err := g.store.Lookup(ctx, token)
	if err != nil {
		return Key{}, err
	}
	if k.Expired(g.now()) {
		return Key{}, fmt.Errorf("%w: key %s expired at %s", ErrExpired, k.ID, k.Expires.Format(time.RFC3339))
	}
	return k, nil
}

// Allows is Key.Allows, and for a bound grant (Key.Bound) also a check
// that cube is still the cube the grant was made for: a grant on a cube
// deleted since (and perhaps made again under its name) allows nothing,
// and is taken from every key (a failure to take it is logged). Errors:
// ErrDenied (wrapped, naming the key, the cube and the right), storage
// errors reading the cube's record.
func (g *Guard) Allows(ctx context.Context, k Key, cube string, need Right) error {
	if err := k.Allows(cube, need); err != nil || !k.Bound(cube) {
		return err
	}
	gr, _ := k.Grant(cube)
	rec, err := g.cubes.Get(ctx, cube)
	if err != nil && !errors.Is(err, textmem.ErrUnknownCube) {
		return err
	}
	if err == nil && rec.Created.Equal(gr.CubeCreated) {
		return nil
	}
	if _, derr := g.store.DropCube(ctx, cube, rec.Created); derr != nil {
		g.log.Warn("access key: dropping a grant on a deleted cube", "cube", cube, "key", k.ID, "err", derr)
	}
	return fmt.Errorf("%w: key %s has no %s right on cube %q (its grant was for a cube deleted since)", ErrDenied, k.ID, need, cube)
}

// Share is Store.SetGrant of right on cube, bound to the cube as it is
// now. Errors: ErrNotFound, the record's error (textmem.ErrUnknownCube),
// ErrBadSpec, storage errors.
func (g *Guard) Share(ctx context.Context, id, cube string, right Right) (Key, error) {
	rec, err := g.cubes.Get(ctx, cube)
	if err != nil {
		return Key{}, err
	}
	return g.store.SetGrant(ctx, id, Grant{Cube: cube, Right: right, CubeCreated: rec.Created})
}
