// Package scheduler decides what memory goes where. Tiers keeps each
// memory's heat (MemoryOS's formula, see HeatOptions), plans promotions
// and demotions between the text and activation tiers as persisted jobs,
// computes packs at background priority (with the prompt layout of
// package layout, through kvcache.Cache.Compute), and records every move.
// UsageBuffer batches the uses that feed the heat. The heat score, the
// usage records and the buffer are package scheduler/heat, named here too.
//
// The request pipeline that uses them (choose the KV source, restore,
// decode, persist, record usage) lives in the root package memosrt.
//
// Tiers and UsageBuffer are safe for concurrent use.
package scheduler
