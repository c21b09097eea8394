// Package convpack names and bounds the pipeline's conversation packs: the
// KV state a chat turn leaves, stored so that the conversation's next turn
// restores it instead of prefilling (labelled Prefix + the cube), and the
// shared packs of requests that read several cubes (SharedPrefix + the
// read cubes, under their SharedScope). It gives each pack label its cube
// and kind (PackCube), tells which stored pack or slot state a request
// may reuse (InScope, Continues, SlotScope, ScopeReads), lists these packs with their bytes (List) and
// deletes the oldest over their budget (Trim).
//
// Package pipeline takes the states and stores the packs (persist); this
// package holds no state of its own: its functions are safe for
// concurrent use, and Trim is called with the pipeline's pack-write lock
// held.
package convpack
