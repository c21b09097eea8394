package runtime

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/runtime/llama"
)

var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errkind.New(errkind.Unavailable, "runtime: engine closed")
	// ErrPromptTooLong is returned when prompt tokens plus at least one
	// generated token do not fit in the sequence's share of n_ctx.
	ErrPromptTooLong = errkind.New(errkind.Invalid, "runtime: prompt longer than the context (n_ctx)")
	// ErrEmptyPrompt is returned when a generation request has no tokens.
	ErrEmptyPrompt = errkind.New(errkind.Invalid, "runtime: empty prompt")
	// ErrBadOptions is returned by Options.Validate and Load for invalid settings.
	ErrBadOptions = errors.New("runtime: invalid options")
	// ErrBadState is returned when serialized sequence state does not parse
	// or does not match the live context; the target sequence is left empty.
	ErrBadState = errors.New("runtime: sequence state rejected")
	// ErrRestoreFailed is returned by RestoreSeq when llama.cpp refuses a
	// state that parsed and matches the live KV layout: most often no free
	// cells for it (llama_state_seq_set_data finds no slot). The state is
	// not proven bad; the sequence is left empty.
	ErrRestoreFailed = errors.New("runtime: sequence state not restored")
	// ErrNoKVSlot is returned when the KV cache has no room for a batch.
	ErrNoKVSlot = llama.ErrNoKVSlot
)
