// Package status holds what the pipeline reports about itself: the
// serving gauges (Stats: slots, queues, resident cells, packs,
// conversation packs, disk), a cube's activation tier (PackStatus, its
// ResidentStatus, each pack's level by Levels), the OS's budgets next to
// their use (Budgets) and the adapters visible from a cube
// (AdapterStatus).
//
// Package pipeline fills them; package memosrt re-exports them and the
// server sends them as JSON (the field tags are the wire names). They are
// plain values.
package status
