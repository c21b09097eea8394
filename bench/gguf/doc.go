// Package gguf writes random-weight GGUF files of realistic shape for timing
// benchmarks (TTFT, decode throughput, KV restore), where the numbers depend
// on tensor shapes and types but not on what the weights say, and for tests
// that need a model of an architecture no small real file has.
//
// A Spec gives the architecture (llama, or BERT for an embedding model) and
// the shape (layers, widths, heads, vocabulary, training context, weight
// type); Presets holds the shapes we use ("1b" and "8b" are the Llama 3.2 1B
// and Llama 3.1 8B shapes with the Llama 2 vocabulary, "tiny" is for tests,
// "bert-tiny" a small BERT encoder with mean pooling for the WordPiece
// vocabulary of ggml-vocab-bert-bge.gguf). Write streams the file through
// ollama's GGUF writer (github.com/ollama/ollama/fs/ggml.WriteGGUF) and
// copies the tokenizer (every tokenizer.* key) from an existing GGUF file,
// so prompts tokenize as with that model. Weights are N(0, 0.02) values drawn from a fast
// deterministic generator seeded per tensor; norm weights are 1 and biases
// 0, so activations stay finite through any number of layers.
//
// Write never holds a whole tensor in memory: each tensor is produced in
// chunks of ChunkBytes by one goroutine (GOMAXPROCS tensors at once), so
// memory use is about GOMAXPROCS*ChunkBytes whatever the file size. The file
// appears at its path only when complete (temporary file, fsync, rename).
//
// Everything here is safe for concurrent use: Write keeps no shared state.
package gguf
