package scheduler

import "github.com/memosrt/memosrt/scheduler/heat"

// The heat score lives in package heat; these are its names here.
type (
	// HeatOptions are the heat score's weights and thresholds (heat.Options).
	HeatOptions = heat.Options
	// Usage is one memory's or pack's persisted access record (heat.Usage).
	Usage = heat.Usage
	// Clock tells the scheduler the time (heat.Clock).
	Clock = heat.Clock
	// OffsetClock is the wall clock moved forward by Advance (heat.OffsetClock).
	OffsetClock = heat.OffsetClock
	// Use is one recorded use of a memory or a pack (heat.Use).
	Use = heat.Use
	// UsageBuffer holds recorded uses until they are written (heat.UsageBuffer).
	UsageBuffer = heat.UsageBuffer
)

// NewUsageBuffer returns an empty buffer (heat.NewUsageBuffer).
func NewUsageBuffer() *UsageBuffer { return heat.NewUsageBuffer() }

// DefaultHeatOptions returns MemoryOS's constants (heat.DefaultOptions).
func DefaultHeatOptions() HeatOptions { return heat.DefaultOptions() }

// SystemClock is the wall clock (heat.SystemClock).
func SystemClock() Clock { return heat.SystemClock() }
