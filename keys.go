package memosrt

import (
	"context"
	"errors"

	"github.com/memosrt/memosrt/accesskey"
)

// ErrUnknownKey is returned by KeyCube for a token that is no access key.
var ErrUnknownKey = accesskey.ErrUnknown

// AccessKey is a bearer token that may use one cube only (its memories,
// packs, chats and exports); the admin token (serve --token) may use all.
type AccessKey = accesskey.Key

// CreateKey returns a new access key for cube and its token (32 random
// bytes, hex, after "msk_"): the token is returned once and only its
// SHA-256 is stored. Errors: ErrUnknownCube, ErrNoSpace, storage errors.
func (o *OS) CreateKey(ctx context.Context, cube string) (AccessKey, string, error) {
	if err := o.g.Enter(); err != nil {
		return AccessKey{}, "", err
	}
	defer o.g.Leave()
	rec, err := o.cubes.Get(ctx, cube)
	if err != nil {
		return AccessKey{}, "", err
	}
	return o.keys.Create(cube, rec.Created, o.opts.Clock.Now())
}

// KeyCube returns the access key of token, or ErrUnknownKey: also for a
// key whose cube was deleted, or deleted and made again (the key is then
// revoked).
func (o *OS) KeyCube(ctx context.Context, token string) (AccessKey, error) {
	k, err := o.keys.Lookup(token)
	if err != nil || k.CubeCreated.IsZero() {
		return k, err
	}
	// the cube it was minted for, not one made since under its name
	rec, err := o.cubes.Get(ctx, k.Cube)
	if errors.Is(err, ErrUnknownCube) || (err == nil && !rec.Created.Equal(k.CubeCreated)) {
		_ = o.keys.Revoke(token)
		return AccessKey{}, ErrUnknownKey
	}
	return k, err
}
