package scheduler

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrClosed is returned by Tiers methods after Close.
	ErrClosed = errors.New("scheduler: closed")
	// ErrKVBudget is returned (and logged by the background loop) when a
	// promotion cannot fit TierOptions.KVBytes even after demoting every
	// cooler member; the memory stays in the text tier.
	ErrKVBudget = errkind.New(errkind.NoSpace, "scheduler: activation tier KV budget exceeded")
	// ErrDeferred is wrapped by a TierOptions.Reserve error when the KV
	// cells a job needs are not free now: the job stays pending for a later
	// tick, counted in TickReport.Deferred, not as a failure.
	ErrDeferred = errors.New("scheduler: job deferred")
	// ErrBusy is returned by Promote when TierOptions.MaxPromoteQueue
	// Promotes wait already: nothing is done, the caller may retry.
	ErrBusy = errors.New("scheduler: pack computations busy")
	// ErrReadOnly is returned by Tick and Promote of a Tiers made without
	// a Layout and an Engine (tools that load no model).
	ErrReadOnly = errkind.New(errkind.NotSupported, "scheduler: tiers opened without a model (read-only)")
)
