package server

import "errors"

var (
	// ErrClosed is returned after Shutdown; HTTP 503.
	ErrClosed = errors.New("server: closed")
	// ErrBadOptions is returned by Options.Validate and New.
	ErrBadOptions = errors.New("server: invalid options")
)
