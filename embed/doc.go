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
// An in-process llama.cpp embedding model belongs to the runtime team; it
// implements Embedder in its own package (embed must not import runtime).
//
// All Embedders in this package are safe for concurrent use.
package embed
