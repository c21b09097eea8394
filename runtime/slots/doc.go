// Package slots lends an engine's request sequences (slots) to requests
// and admits their KV cells: KV admission beside the engine.
//
// A Pool holds a fixed set of sequences. Acquire lends the free one whose
// held tokens best continue the request's prompt within its scope (its
// cube), through a bounded queue (ErrQueueFull past it); background work
// takes a slot only when one is idle (AcquireBackground) and a foreground
// request that finds none preempts it (ErrPreempted). Admit reserves the
// request's cells in the unified KV cache of n_ctx cells, in arrival
// order: idle slots are emptied least recently used first, and the cells
// held outside the slots (Fixed: memosrt's resident packs) are evicted
// only when the request's least would not fit otherwise. Drain answers
// every waiter with the pool's closed error.
//
// Resident is the resident level: cubes' packs held in their own
// sequences, the Fixed cells of memosrt's pool. Its owner is told of the
// packs Evict drops through the evicted function it passes to
// NewResident (a documented hook: it runs under Pool.mu and must not
// block).
//
// Main types: Pool (safe for concurrent use), Resident (safe for
// concurrent use), Slot (one sequence: its
// Seq is fixed; ConvPack, Toks and SetScope belong to the request holding
// it), Fixed.
//
// Lock order: Pool.mu, then Resident's (Evict is called with Pool.mu
// held), then the engine's (the clear callbacks).
package slots
