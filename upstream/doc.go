// Package upstream generates through another inference server instead of
// a model loaded in this process: an Ollama server through its native API
// (github.com/ollama/ollama/api), or any OpenAI-compatible server (vLLM,
// llama-server, LM Studio, SGLang, another memosrt) through its
// /v1/chat/completions, /v1/completions and /v1/embeddings routes
// (github.com/openai/openai-go).
//
// The request pipeline (package pipeline) keeps what is its own: it
// retrieves a cube's memories and assembles the prompt with package
// layout, as for a loaded model, and hands the resulting messages to a
// Backend; it holds the request slots and records the memories used. A
// Backend only translates one Request into the upstream's wire format and
// back: sampling options, tools and tool calls, the output format,
// streamed text, the upstream's own token counts (never an estimate of
// ours), and its errors as this module's error kinds (package errkind).
// No KV packs and no LoRA adapters reach an upstream: its prompt is text.
//
// Main types: Options (what Open's Options.Upstream holds), Backend (New),
// Request, Result.
//
// Concurrency: a Backend is safe for concurrent use; each call is one
// HTTP request (streamed) to the upstream. The API key in Options is sent
// as "Authorization: Bearer KEY" and never logged (Options.LogValue omits
// it).
package upstream
