// Package wire is what every HTTP surface of memosrt's server shares (the
// Ollama, OpenAI, native, memory and MCP APIs): reading a request body as
// JSON (Decode, DecodeStrict) and refusing text that is not text in it or
// in the URL (CheckJSONText, CheckURLText), a body's read deadline
// (TimeBody), field errors (BadField, InField), the one table from an
// error (its errkind.Kind, or the server's own refusals ErrUnauthorized,
// ErrForbidden, ErrMethodNotAllowed, ErrBodyTimeout) to an HTTP status and
// OpenAI error type (Status, Field), writing JSON answers and errors in
// Ollama's or OpenAI's shape (WriteJSON, WriteError), streamed answers as
// NDJSON or SSE (Streamer, StreamError), and access: what a route needs of
// the bearer token (Need, Router), the request's access key (WithKey, Key)
// and the checks of its grants (Allow, DefaultCube, ReadOnly).
//
// It holds no state: its functions are safe for concurrent use, a
// Streamer belongs to its request's goroutine, and the status table is
// read-only. It imports the root package for its error types and is
// imported by package server and its surfaces, never the reverse.
package wire
