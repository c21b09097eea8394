package server

import "errors"

var (
	// ErrBusy is returned when every slot is taken and Options.MaxQueue
	// requests already wait; HTTP 429.
	ErrBusy = errors.New("server: queue full")
	// ErrLoading is returned by inference calls before a backend is
	// attached (UseEngine, UseOllama); HTTP 503.
	ErrLoading = errors.New("server: model loading")
	// ErrClosed is returned after Shutdown or Close; HTTP 503.
	ErrClosed = errors.New("server: closed")
	// ErrBadOptions is returned by Options.Validate and New.
	ErrBadOptions = errors.New("server: invalid options")
	// ErrUnknownCube is returned for a cube that was neither created nor
	// holds memories; HTTP 404.
	ErrUnknownCube = errors.New("server: unknown cube")
	// ErrCubeExists is returned when creating a cube that exists; HTTP 409.
	ErrCubeExists = errors.New("server: cube exists")
	// ErrNotSupported is returned by a backend for what it cannot do (the
	// Ollama backend has no KV packs; the llama backend embeds only with an
	// Embedder); HTTP 501.
	ErrNotSupported = errors.New("server: not supported by this backend")
	// ErrUpstream is returned by the Ollama backend when the upstream
	// server fails or its stream ends early (for example a line longer than
	// the client's 8 MiB buffer, which the client drops silently); HTTP 502.
	ErrUpstream = errors.New("server: upstream ollama failed")
	// ErrBadArchive is returned by import for a file that is not a cube
	// archive of a known format version; HTTP 400.
	ErrBadArchive = errors.New("server: bad cube archive")
)
