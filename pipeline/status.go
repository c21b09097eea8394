package pipeline

import "github.com/memosrt/memosrt/pipeline/status"

// What the pipeline reports lives in package pipeline/status (package
// memosrt re-exports it); these are its names here.
type (
	// Stats are the serving gauges (status.Stats).
	Stats = status.Stats
	// PackStatus is a cube's activation tier (status.PackStatus).
	PackStatus = status.PackStatus
	// ResidentStatus is a pack held at the resident level
	// (status.ResidentStatus).
	ResidentStatus = status.ResidentStatus
	// Budgets are the OS's bounds next to what uses them now
	// (status.Budgets).
	Budgets = status.Budgets
	// AdapterStatus is an adapter visible from a cube and whether it is
	// loaded now (status.AdapterStatus).
	AdapterStatus = status.AdapterStatus
)
