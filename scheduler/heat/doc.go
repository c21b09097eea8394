// Package heat is the heat score that decides which memories move between
// the text and activation tiers: Options (MemoryOS's weights, time
// constants and thresholds), Usage (one memory's or pack's persisted
// access record, its counts decaying with time, and its heat at a given
// time), Use and UsageBuffer (the uses that feed the heat, batched until
// they are written), and the clocks the scheduler reads the time from
// (Clock, SystemClock, OffsetClock).
//
// Package scheduler persists the usage records, computes heats with them
// and plans promotions and demotions; it re-exports these types under
// its own names (scheduler.HeatOptions, scheduler.Usage,
// scheduler.Clock, scheduler.OffsetClock, scheduler.Use,
// scheduler.UsageBuffer); scheduler.Tiers is the Recorder a UsageBuffer
// flushes to.
//
// Options, Usage and Use are plain values; UsageBuffer and OffsetClock
// are safe for concurrent use.
package heat
