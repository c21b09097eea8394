package accesskey

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

// Errors of the Store, the Guard and Key.Allows.
var (
	// ErrUnknown is returned by Lookup for a token that is no access key
	// (never made, revoked, or dropped with the last cube it named).
	ErrUnknown = errors.New("accesskey: unknown access key")
	// ErrNotFound is returned for a key id that names no key, and by
	// RemoveGrant for a cube the key has no grant on.
	ErrNotFound = errkind.New(errkind.NotFound, "accesskey: no such key")
	// ErrBadSpec is wrapped by Create and SetGrant for a key they cannot
	// make: no cube, a bad cube name or right, a cube named twice, an
	// expiry not in the future, a name too long.
	ErrBadSpec = errkind.New(errkind.Invalid, "accesskey: bad key")
	// ErrLastGrant is returned by RemoveGrant for the only cube of a key:
	// revoke the key instead.
	ErrLastGrant = errkind.New(errkind.Conflict, "accesskey: the key's only cube: revoke the key instead")
	// ErrDenied is wrapped by Key.Allows and Guard.Allows for a cube or right the key
	// lacks; the message names the key, the cube and the right.
	ErrDenied = errors.New("accesskey: access denied")
	// ErrExpired is wrapped by Guard.Lookup for a key past its Expires
	// by the Guard's clock.
	ErrExpired = errors.New("accesskey: access key expired")
)
