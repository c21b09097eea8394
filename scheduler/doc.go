// Package scheduler decides what memory goes where and assembles requests
// from the tiers: it renders a cube's memories into a prompt whose leading
// part is the cube's pack (served from the activation tier as restored KV
// state), retrieves further memories from the text tier for the rest, and runs
// generation on the engine.
//
// Runner is safe for concurrent use; generation itself is serialized by the
// engine.
package scheduler
