package scheduler

import "errors"

var (
	// ErrClosed is returned by Tiers methods after Close.
	ErrClosed = errors.New("scheduler: closed")
	// ErrKVBudget is returned (and logged by the background loop) when a
	// promotion cannot fit TierOptions.KVBytes even after demoting every
	// cooler member; the memory stays in the text tier.
	ErrKVBudget = errors.New("scheduler: activation tier KV budget exceeded")
)
