package server

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrClosed is returned after Shutdown; HTTP 503.
	ErrClosed = errkind.New(errkind.Unavailable, "server: closed")
	// ErrBadOptions is returned by Options.Validate and New.
	ErrBadOptions = errors.New("server: invalid options")
)
