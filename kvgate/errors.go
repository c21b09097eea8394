package kvgate

import "github.com/memosrt/memosrt/errkind"

var (
	// ErrBadOptions is returned for targets, samples or a codec setting
	// out of range.
	ErrBadOptions = errkind.New(errkind.Invalid, "kvgate: invalid options")
	// ErrClosed is returned by a Gate's methods after Close.
	ErrClosed = errkind.New(errkind.Unavailable, "kvgate: closed")
)
