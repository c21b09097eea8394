package memosrt

import (
	"context"

	"github.com/memosrt/memosrt/accesskey"
	"github.com/memosrt/memosrt/internal/gate"
)

// Errors of access keys.
var (
	// ErrUnknownKey is returned by Key for a token that is no access key
	// (never made, revoked, or dropped with the last cube it named).
	ErrUnknownKey = accesskey.ErrUnknown
	// ErrKeyExpired is returned by Key for a key past its Expires.
	ErrKeyExpired = accesskey.ErrExpired
	// ErrKeyDenied is wrapped by KeyAllows for a cube or right the key
	// lacks; the message names the key, the cube and the right.
	ErrKeyDenied = accesskey.ErrDenied
	// ErrKeyNotFound is returned for a key id that names no key.
	ErrKeyNotFound = accesskey.ErrNotFound
	// ErrBadKeySpec is wrapped by CreateKey and ShareCube for a key they
	// cannot make (no cube, a cube twice, a bad right, a past expiry).
	ErrBadKeySpec = accesskey.ErrBadSpec
	// ErrLastGrant is returned by UnshareCube for a key's only cube.
	ErrLastGrant = accesskey.ErrLastGrant
)

// AccessKey is the record of a bearer token of `memosrt serve` that may
// use the cubes of its grants, each with read or write rights, until it
// expires; the admin token (serve --token) may use all. The token itself is
// never stored.
type AccessKey = accesskey.Key

// KeyGrant is one cube an access key may use and its right there.
type KeyGrant = accesskey.Grant

// KeyRight is what a grant lets a key do: KeyRead or KeyWrite.
type KeyRight = accesskey.Right

// Access key rights; KeyWrite includes KeyRead.
const (
	KeyRead  = accesskey.Read
	KeyWrite = accesskey.Write
)

// KeySpec is what CreateKey makes a key of: a name, grants (each cube once,
// CubeCreated filled by CreateKey), an optional expiry and who made it.
type KeySpec = accesskey.Spec

// ParseKeyRight reads "read" or "write"; anything else wraps ErrBadKeySpec.
func ParseKeyRight(s string) (KeyRight, error) { return accesskey.ParseRight(s) }

// CreateKey makes an access key of spec and returns it with its token (32
// random bytes, hex, after "msk_"): the token is returned once and only
// its SHA-256 is stored, in the text store, so every node sharing that
// store takes it. Each grant is bound to its cube as it is now (a cube
// deleted and made again under the name is another cube the grant does not
// open). Errors: ErrBadKeySpec (every problem of spec), ErrUnknownCube
// naming the cube, ErrNoSpace, storage errors.
func (o *OS) CreateKey(ctx context.Context, spec KeySpec) (AccessKey, string, error) {
	if err := o.g.Enter(); err != nil {
		return AccessKey{}, "", err
	}
	defer o.g.Leave()
	return o.guard.Create(ctx, spec)
}

// Key returns the access key of token: ErrUnknownKey when there is none,
// ErrKeyExpired (wrapped, with the time) when it has expired by the OS's
// clock. Nothing is cached: a key revoked on any node sharing the text
// store is unknown at the next call.
func (o *OS) Key(ctx context.Context, token string) (AccessKey, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (AccessKey, error) { return o.guard.Lookup(ctx, token) })
}

// KeyAllows returns nil when k may use cube with need, else an error
// wrapping ErrKeyDenied naming the key, the cube and the right missing. A
// grant made for a cube that was deleted since (and perhaps made again
// under its name) allows nothing, and is taken from the key. Errors also:
// storage errors reading the cube's record.
func (o *OS) KeyAllows(ctx context.Context, k AccessKey, cube string, need KeyRight) error {
	if err := k.Allows(cube, need); err != nil || !k.Bound(cube) {
		return err // nothing to read: no right, or a key made before cubes had creation times
	}
	return gate.Do(o.g, ctx, func(ctx context.Context) error { return o.guard.Allows(ctx, k, cube, need) })
}

// Keys returns every access key, oldest first, without tokens (none is
// stored).
func (o *OS) Keys(ctx context.Context) ([]AccessKey, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) ([]AccessKey, error) { return o.keys.List(ctx) })
}

// GetKey returns the access key with id: ErrKeyNotFound when there is
// none.
func (o *OS) GetKey(ctx context.Context, id string) (AccessKey, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (AccessKey, error) { return o.keys.Get(ctx, id) })
}

// RevokeKey deletes the access key with id: its token is refused from
// the next request on, on every node sharing the text store. Errors:
// ErrKeyNotFound, storage errors.
func (o *OS) RevokeKey(ctx context.Context, id string) error {
	return gate.Do(o.g, ctx, func(ctx context.Context) error { return o.keys.Revoke(ctx, id) })
}

// ShareCube gives the access key with id right on cube: a grant it had
// there is replaced (so sharing with KeyRead takes a write right back).
// Errors: ErrKeyNotFound, ErrUnknownCube, ErrBadKeySpec, storage errors.
func (o *OS) ShareCube(ctx context.Context, cube, id string, right KeyRight) (AccessKey, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (AccessKey, error) { return o.guard.Share(ctx, id, cube, right) })
}

// UnshareCube takes cube from the access key with id. Errors:
// ErrKeyNotFound (no such key, or no grant on cube), ErrLastGrant (revoke
// the key instead), storage errors.
func (o *OS) UnshareCube(ctx context.Context, cube, id string) (AccessKey, error) {
	return gate.Call(o.g, ctx, func(ctx context.Context) (AccessKey, error) { return o.keys.RemoveGrant(ctx, id, cube) })
}
