package memosrt

import (
	"errors"
	"fmt"

	"github.com/memosrt/memosrt/badger"
	"github.com/memosrt/memosrt/errkind"
)

var (
	// ErrClosed is returned by every method after Close; HTTP 503.
	ErrClosed = errkind.New(errkind.Unavailable, "memosrt: closed")
	// ErrBadOptions is returned by Options.Validate and Open.
	ErrBadOptions = errors.New("memosrt: invalid options")
	// ErrNoModel is returned by inference calls of an OS opened without a
	// model (Options.Model and Options.Upstream empty); HTTP 503.
	ErrNoModel = errkind.New(errkind.Unavailable, "memosrt: no model loaded")
	// ErrBusy is returned when every request sequence is taken and
	// Options.MaxQueue requests already wait; HTTP 429.
	ErrBusy = errkind.New(errkind.Busy, "memosrt: queue full")
	// ErrUnknownCube is returned for a cube that was neither created nor
	// holds memories; HTTP 404.
	ErrUnknownCube = errkind.New(errkind.NotFound, "memosrt: unknown cube")

	// ErrTextStoreElsewhere is returned by Open without Options.TextStore
	// on a data directory whose text tier was kept in a shared store
	// (serve --text-store): its own holds none of those memories.
	ErrTextStoreElsewhere = errors.New("memosrt: this data directory's memories are in a shared text store: start serve with --text-store and that store, and CLI commands on the directory go through the server (serve --text-store local serves the directory's own text tier instead)")
	// ErrCubeExists is returned by CreateCube for a name in use; HTTP 409.
	ErrCubeExists = errkind.New(errkind.Conflict, "memosrt: cube exists")
	// ErrNotSupported is returned for what the configured backend cannot
	// do (the upstream backend has no KV packs or adapters); HTTP 501.
	ErrNotSupported = errkind.New(errkind.NotSupported, "memosrt: not supported by this backend")
	// ErrUpstream is returned by the upstream backend when the Ollama
	// server fails or its stream ends early (a line longer than the
	// client's 8 MiB buffer is dropped silently by the client); HTTP 502.
	ErrUpstream = errkind.New(errkind.Upstream, "memosrt: upstream ollama failed")
	// ErrModelNotFound is returned for a model name this OS does not
	// serve (the upstream's 404); HTTP 404.
	ErrModelNotFound = errkind.New(errkind.NotFound, "memosrt: model not found")
	// ErrNoRoom is returned when a request's prompt and a minimal
	// generation budget cannot fit the KV cache even with every idle
	// sequence emptied (resident packs hold the rest), and for a tier job
	// when its cells are not free now (it runs again at a later tick);
	// HTTP 400 with the numbers.
	ErrNoRoom = errors.New("memosrt: the KV cache cannot hold this request")
	// ErrBadArchive is returned by ImportCube for input that is not a cube
	// archive of a known format version; HTTP 400.
	ErrBadArchive = errkind.New(errkind.Invalid, "memosrt: bad cube archive")
	// ErrNoSpace is returned by writes to the data directory (memory adds
	// and edits, cube records, KV pack saves and warm jobs, access keys,
	// adapters) when its filesystem lacks the free space the write and the
	// store's file writes after it may take, and by Open when it lacks the
	// space that opening writes; the message names the directory and the
	// free and needed bytes. Nothing of the refused write is stored; reads
	// and generation go on, and writes succeed again once space is freed.
	// HTTP 507. It is badger.ErrNoSpace; docs/data-directory.md, "A full
	// disk", gives the reserve it keeps.
	ErrNoSpace = badger.ErrNoSpace
)

// FieldError is a request that is invalid because of one field (HTTP 400
// naming it): Field is the request's field path ("messages",
// "context[3]", "adapters"), Msg says what is wrong with it.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// badField returns a *FieldError.
func badField(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
