// Package embedding turns texts into dense vectors with a GGUF model
// through llama.cpp: the one routine that tokenizes, truncates, decodes
// with embeddings on, pools and L2-normalizes, whichever model runs it.
//
// Encoder is that routine over one llama context of a loaded model
// (llama.Model): runtime.Engine.Embed runs it on the chat model, and Model
// runs it on an embedding model of its own, loaded from a GGUF file
// (Open), which embed/llamaembed serves as an embed.Embedder.
//
// Pooling is the model's (Pooling): the <arch>.pooling_type its GGUF
// declares (BERT-style embedding models: 1 mean, 2 CLS, 3 last token), and
// mean pooling for a model that declares none or 0 (decoder models). A
// model that pools for ranking (4, a reranker) is refused.
//
// An Encoder is not safe for concurrent use: its owner serializes calls
// (runtime.Engine under its own lock). A Model is safe for concurrent use:
// one mutex (Model.mu) guards its Encoder and is held for a whole Embed
// call; it is the only lock of this package. Close frees the context, then
// the model, and is idempotent; after it every method returns ErrClosed.
package embedding
