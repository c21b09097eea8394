package kvcache

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrCorrupt is returned when a blob fails its magic, length or checksum checks.
	ErrCorrupt = errkind.New(errkind.Invalid, "kvcache: corrupt blob")
	// ErrVersion is returned for a blob of an unknown format version.
	ErrVersion = errkind.New(errkind.Invalid, "kvcache: unsupported blob format version")
	// ErrMismatch is returned when a blob was computed under another KV
	// config (model, KV types, V layout, adapter set) or needs a larger n_ctx.
	ErrMismatch = errors.New("kvcache: blob does not match the live context")
	// ErrNotFound is returned when no pack has the requested id.
	ErrNotFound = errkind.New(errkind.NotFound, "kvcache: pack not found")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("kvcache: closed")
	// ErrTooLarge is returned for a blob or state beyond MaxRawBytes.
	ErrTooLarge = errors.New("kvcache: state too large")
)
