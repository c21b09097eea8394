// Package memchunk keeps per-memory KV chunks in the activation tier and
// composes them into a request's sequence. A chunk is one memory's bullet
// line (layout.Layout.LineTokens) prefilled after the model's BOS alone,
// its cells stored as a kvcache pack labelled "chunk:<cube>:<memory id>"
// in a scope of its own (Scope: never found by the cube's prefix
// lookups), its id a content address over the KV config (the model's
// fingerprint included), the adapter set and the tokens (ID): an edited
// memory's old chunk is never found. A Composer places the chunks of a
// prompt's retrieved block after the sequence's reused prefix
// (runtime.Engine.ComposeSeq with a Held preamble), K-shifted to their
// positions, with a fraction of their tokens decoded again; Sweep deletes
// chunks whose memory is gone or changed. docs/design.md, Composition,
// has the whole design; package pipeline drives it.
//
// Main types: Composer (one per loaded model: its scratch sequences and
// the chunks' preamble; safe for concurrent use, one composition or chunk
// prefill at a time, under its mutex), Plan (what a prompt can compose),
// Composed (what a composition placed), Counter (retrievals towards a
// chunk; safe for concurrent use).
package memchunk
