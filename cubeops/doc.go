// Package cubeops does what touches every tier of a cube at once: delete
// it everywhere (Delete: memories, packs, tier state, pooled sequences,
// resident packs, access keys, record), follow the deletes of other nodes
// sharing the text store (Drop, Resync), and export it to one archive and
// import it again (Export, Import; package cubearchive has the format):
// its record, memories with their ids, times and versions, KV packs and
// activation tier membership, so that an imported cube restores its packs
// instead of prefilling them. Functions over Stores, which package
// memosrt's OS lends them; they hold no state of their own (but for
// Deleting, the set of cubes being deleted that the OS keeps and Warm
// reads, so that a warm racing a delete answers that the cube is gone) and
// are safe for concurrent use as the stores are. A failed import leaves no part of
// the cube behind.
package cubeops
