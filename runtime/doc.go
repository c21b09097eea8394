// Package runtime runs inference on a GGUF model with llama.cpp: model load,
// tokenization, chat templates, batched prefill and decode, sampling, stop
// strings, streaming and cancellation, and per-sequence KV operations
// (save/restore state, remove a range, copy, shift), and composition of
// per-memory KV chunks (PrefillChunk, ComposeSeq: K-shift plus a
// CacheBlend-style selective recompute, guarded by ShiftGuard).
//
// The C binding lives in the subpackage runtime/llama, the only package that
// imports "C". An Engine owns one model and one llama context with NSeqMax
// sequences in one KV cache of NCtx cells (unified when NSeqMax > 1).
//
// Concurrency: an Engine is safe for concurrent use. Generate queues a
// request for the batch goroutine, which runs every request's prefill and
// decode in shared llama_decode steps (continuous batching); the other
// methods that touch the llama context are serialized with it by the
// engine mutex.
//
// Lock order, outermost first (never take one while holding a later one):
//
//  1. the caller's locks above the engine (memosrt's slot pool, resident
//     level; lora.Manager's, which calls DetachAdapter);
//  2. the batcher lock (queue, active set, adapter set): Generate,
//     BeginForeground's wake-up, DetachAdapter, admission;
//  3. the engine lock (the llama context): a batch step, ClearSeq,
//     SaveSeq, RestoreSeq, CopySeq and the other sequence operations;
//     ComposeSeq holds it for the whole composition (restores, shifts,
//     probe and recompute decodes), so batch steps wait for it.
//
// A step holds the engine lock only: the jobs it ends are finished after
// it releases the lock, under the batcher lock. Request callbacks
// (OnText) run on the batch goroutine with the batcher lock held: they
// must not call back into the engine.
//
// Note the package name shadows the standard library's runtime; import that
// one as goruntime where both are needed.
package runtime
