// Package llamaembed is the in-process embed.Embedder over a GGUF embedding
// model run by llama.cpp (runtime/embedding.Model): a BERT-style model such
// as nomic-embed-text or bge pooled as its GGUF says, or any decoder model
// pooled by the mean; vectors L2-normalized. It lives apart from package
// embed so that embed (and the text tier above it) stays pure Go: this
// package pulls in cgo.
//
// A Llama is safe for concurrent use (its model serializes Embed calls);
// Close frees the model and is idempotent.
package llamaembed
