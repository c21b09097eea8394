// Package server is memosrt's HTTP front end: the Ollama API (/api/...), the
// OpenAI API (/v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/models), the memory API (/v1/cubes/...) and Prometheus metrics
// (/metrics), all on one stdlib http.ServeMux.
//
// Wire types (Ollama's github.com/ollama/ollama/api types, the OpenAI JSON
// shapes) are turned into one internal request (genRequest) and served by a
// backend:
//
//   - the llama backend (UseEngine): an in-process runtime.Engine whose
//     NSeqMax sequences are split into request slots (Options.Parallel) and
//     resident slots (Options.ResidentPacks). A request picks the free slot
//     whose held tokens share the longest prefix with its prompt (a
//     conversation's previous turn stays resident), or shares a resident
//     pack's cells into its slot (Engine.CopySeq, nothing copied), or
//     restores the longest cached prefix from the activation tier
//     (kvcache). After a chat turn the sequence state is saved as a pack
//     labelled "conv:<cube>" so the next turn restores it after a restart.
//   - the Ollama backend (UseOllama): a text-only fallback that puts the
//     cube's memories into the prompt as text and generates through the
//     official client github.com/ollama/ollama/api.
//
// The engine batches requests on different sequences into one llama_decode
// (continuous batching); its OnText callback runs on the engine's batch
// goroutine, so streamed text is only queued there and written to the
// client by the request's own goroutine. num_ctx and the sampling options
// are per request: a request never reloads the model; num_ctx below the
// loaded n_ctx limits that request, above it is capped at n_ctx.
//
// A request picks its memory cube with the header X-Memosrt-Cube or the
// option "cube"; without one it is plain inference. Requests wait in a
// bounded queue for a slot; when Options.MaxQueue requests already wait the
// server answers 429 at once. A client that disconnects cancels its request
// and frees its slot.
//
// Until a backend is attached the inference endpoints answer 503; the memory
// API (text tier) works from New on.
//
// Concurrency: a *Server is safe for concurrent use. Shutdown stops
// accepting requests, waits for in-flight ones and for background pack
// writes, then returns; Close also closes the attached backend (not the
// engine or stores, which the caller owns).
package server
