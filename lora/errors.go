package lora

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

// Sentinel errors. The returned errors wrap them with the values that explain
// them; test with errors.Is.
var (
	// ErrBadAdapter is returned by Inspect, Check, Registry.Add and
	// Manager.Acquire when an adapter file is not a LoRA adapter llama.cpp
	// can safely apply to the base model: not a GGUF, general.type is not
	// "adapter", adapter.type is not "lora", another architecture, metadata
	// of the wrong type, a tensor the base model lacks, a wrong shape, rank
	// or tensor type, or an A/B half without its partner. llama.cpp never
	// sees such a file.
	ErrBadAdapter = errkind.New(errkind.Invalid, "lora: adapter refused")

	// ErrChanged is returned by Manager.Acquire when the adapter file's
	// SHA-256 differs from the one recorded when it was registered (the file
	// was replaced); register it again.
	ErrChanged = errkind.New(errkind.Invalid, "lora: adapter file changed since it was registered")

	// ErrNotFound is returned when no adapter of that name is registered for
	// the cube or globally.
	ErrNotFound = errkind.New(errkind.NotFound, "lora: adapter not found")

	// ErrExists is returned by Registry.Add when the name is taken in that
	// scope and Replace is not set.
	ErrExists = errors.New("lora: adapter already registered")

	// ErrBadName is returned for a name that is not 1..64 characters of
	// [A-Za-z0-9._-], a bad cube name, or a malformed NAME[:SCALE] spec.
	ErrBadName = errkind.New(errkind.Invalid, "lora: bad adapter name or spec")

	// ErrBudget is returned by Manager.Acquire when the requested adapters
	// do not fit Options.MaxBytes together with the adapters other leases
	// hold.
	ErrBudget = errkind.New(errkind.Unavailable, "lora: adapter memory budget exceeded")

	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("lora: closed")
)
