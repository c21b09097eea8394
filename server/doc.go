// Package server is memosrt's HTTP front end over one memosrt.OS: the
// Ollama API (/api/...), the OpenAI API (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/models), the native generate
// route (/v1/generate) and Prometheus metrics (/metrics), all on one
// stdlib http.ServeMux, with the surfaces it mounts from its
// sub-packages: the memory API (package server/memory: /v1/cubes/...,
// /v1/packs, /v1/tiers/tick, /v1/keys and sharing, /v1/backup and the
// conversation memory), the MCP tools over streamable HTTP at /mcp (package
// server/mcp, the same tools `memosrt mcp` serves on stdio through
// NewMCP) and the playground page at /ui (package server/ui). What every
// surface shares (body decoding, field errors, the error status table,
// streaming, what a route needs of an access key) is package server/wire; server/...
// packages import each other only downward: server imports them, never
// the reverse.
//
// Server keeps the routing and the middleware every route passes through
// (wrap): the shutdown gate, the bearer token (the admin token, or an
// access key looked up in the text store on every request: 401 for an
// unknown, revoked or expired one), the text of the path and query, body
// size and read deadline, panics answered 500, request logs and metrics,
// and 405 with Allow for a path served with another method (allow.go).
// Every route is added through a wire.Router with what it needs (public,
// any key, read or write on the path's cube, the admin token; Server.table
// lists them) and guard refuses an access key that lacks it: 403 naming
// the cube and the right. Chats and generations check read on the cube
// they name (Server.cube); a key that may read a cube but not write it
// chats there without recording the turn or a conversation pack.
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
