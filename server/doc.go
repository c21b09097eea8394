// Package server is memosrt's HTTP front end over one memosrt.OS: the
// Ollama API (/api/...), the OpenAI API (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/models), the memory API
// (/v1/cubes/..., /v1/packs, /v1/tiers/tick; the conversation memory of
// conversations.go: messages, extraction jobs, profile, turns, sessions,
// change logs) and Prometheus metrics
// (/metrics), all on one stdlib http.ServeMux; the MCP tools (NewMCP)
// over streamable HTTP at /mcp, the same tools `memosrt mcp` serves on
// stdio; and the inspector page at /ui (ui.go: static files embedded from
// ui/, which read the JSON APIs with the user's bearer token).
//
// The package only translates: wire types (Ollama's
// github.com/ollama/ollama/api types, the OpenAI JSON shapes) become one
// memosrt.Request, handed to memosrt.OS.Chat or Generate, and the
// memosrt.Response becomes the wire answer. Prompt assembly, the choice of
// KV source, restores, conversation state and usage all live in the root
// package; a request's cube comes from the header X-Memosrt-Cube or the
// option "cube" (without one it is plain inference), and what a chat
// turn leaves in the cube's memory from the field "record" ("", "user",
// "none"; memosrt.Request.Record).
//
// Streamed text is written by the request's goroutine (memosrt delivers it
// there); a client that disconnects cancels its request and frees its
// sequence. Errors are JSON with the right status: 400 naming the field,
// 404, 409, 413, 429 (the OS's bounded queue is full), 501, 502, 503.
//
// Concurrency: a *Server is safe for concurrent use. Shutdown stops
// accepting requests and waits for in-flight ones; the caller then closes
// the OS.
package server
