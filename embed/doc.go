// Package embed turns texts into dense vectors for the text tier's dense
// retrieval.
//
// Embedder is the contract. Implementations here:
//
//   - Ollama: a model served by Ollama's /api/embed, through the official
//     client github.com/ollama/ollama/api.
//   - Hash: a deterministic feature-hashing embedder (words and character
//     trigrams hashed into a fixed number of signed buckets). No model, no
//     network; for tests and as a cheap sub-word similarity signal.
//   - none: a nil Embedder means lexical retrieval only.
//
// A GGUF embedding model run in process by llama.cpp is the Embedder of
// package embed/llamaembed (embed must not import runtime: that one pulls
// in cgo).
//
// All Embedders in this package are safe for concurrent use.
package embed
