// Package scheduler decides what memory goes where. Layout is the one
// prompt layout: it renders a cube's pack (the activation tier's members,
// served as restored KV state) as the leading system turn, retrieved
// memories of the text tier before the last user turn, and the
// conversation, so that the pack's tokens are a prefix of every prompt of
// the cube. Tiers keeps each memory's heat (MemoryOS's formula, see
// HeatOptions), plans promotions and demotions between the text and
// activation tiers as persisted jobs, computes packs at background
// priority, and records every move.
//
// The request pipeline that uses them (choose the KV source, restore,
// decode, persist, record usage) lives in the root package memosrt.
//
// Layout and Tiers are safe for concurrent use.
package scheduler
