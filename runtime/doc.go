// Package runtime runs inference on a GGUF model with llama.cpp: model load,
// tokenization, chat templates, batched prefill and decode, sampling, stop
// strings, streaming and cancellation, and per-sequence KV operations
// (save/restore state, remove a range, copy, shift).
//
// The C binding lives in the subpackage runtime/llama, the only package that
// imports "C". An Engine owns one model and one llama context with NSeqMax
// sequences sharing one unified KV cache of NCtx cells.
//
// Concurrency: an Engine is safe for concurrent use; its methods that touch
// the llama context are serialized by an internal mutex (one request at a
// time runs prefill/decode). Continuous batching across sequences is layered
// above by the server.
//
// Note the package name shadows the standard library's runtime; import that
// one as goruntime where both are needed.
package runtime
