package memosrt

import (
	"errors"
	"fmt"

	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/slots"
	"github.com/memosrt/memosrt/textmem"

	"github.com/memosrt/memosrt/cubearchive"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/pipeline"
)

var (
	// ErrClosed is returned by every method after Close; HTTP 503.
	ErrClosed = pipeline.ErrClosed
	// ErrBadOptions is returned by Options.Validate and Open.
	ErrBadOptions = pipeline.ErrBadOptions
	// ErrNoModel is returned by inference calls of an OS opened without a
	// model (Options.Model and Options.Upstream empty); HTTP 503.
	ErrNoModel = pipeline.ErrNoModel
	// ErrBusy is returned when every request sequence is taken and
	// Options.MaxQueue requests already wait; HTTP 429.
	ErrBusy = pipeline.ErrBusy
	// ErrUnknownCube is returned for a cube that was neither created nor
	// holds memories; HTTP 404.
	ErrUnknownCube = textmem.ErrUnknownCube

	// ErrTextStoreElsewhere is returned by Open without Options.TextStore
	// on a data directory whose text tier was kept in a shared store
	// (serve --text-store): its own holds none of those memories.
	ErrTextStoreElsewhere = errors.New("memosrt: this data directory's memories are in a shared text store: start serve with --text-store and that store, and CLI commands on the directory go through the server (serve --text-store local serves the directory's own text tier instead)")
	// ErrCubeExists is returned by CreateCube for a name in use; HTTP 409.
	ErrCubeExists = textmem.ErrCubeExists
	// ErrNotSupported is returned for what the configured backend cannot
	// do (the upstream backend has no KV packs or adapters); HTTP 501.
	ErrNotSupported = pipeline.ErrNotSupported
	// ErrUpstream is returned by the upstream backend when the Ollama
	// server fails or its stream ends early (a line longer than the
	// client's 8 MiB buffer is dropped silently by the client); HTTP 502.
	ErrUpstream = pipeline.ErrUpstream
	// ErrModelNotFound is returned for a model name this OS does not
	// serve (the upstream's 404); HTTP 404.
	ErrModelNotFound = pipeline.ErrModelNotFound
	// ErrNoRoom is returned when a request's prompt and a minimal
	// generation budget cannot fit the KV cache even with every idle
	// sequence emptied (resident packs hold the rest), and for a tier job
	// when its cells are not free now (it runs again at a later tick);
	// HTTP 400 with the numbers.
	ErrNoRoom = slots.ErrNoRoom
	// ErrBadArchive is returned by ImportCube for input that is not a cube
	// archive of a known format version; HTTP 400. It is cubearchive.ErrBad,
	// which every error of the archive reader wraps.
	ErrBadArchive = cubearchive.ErrBad
	// ErrNoSpace is returned by writes to the data directory (memory adds
	// and edits, cube records, KV pack saves and warm jobs, access keys,
	// adapters) when its filesystem lacks the free space the write and the
	// store's file writes after it may take, and by Open when it lacks the
	// space that opening writes; the message names the directory and the
	// free and needed bytes. Nothing of the refused write is stored; reads
	// and generation go on, and writes succeed again once space is freed.
	// HTTP 507. It is datadir.ErrNoSpace; docs/data-directory.md, "A full
	// disk", gives the reserve it keeps.
	ErrNoSpace = datadir.ErrNoSpace
	// ErrSlowReader ends a generation whose Request.OnText does not keep
	// up (more than 4 MiB of text queued); it is runtime.ErrSlowReader.
	ErrSlowReader = runtime.ErrSlowReader
)

// ErrorKind is what an error means to the caller: fix the request, look
// elsewhere, retry later, free disk space. KindOf reads it from any error
// this package returns; the server answers each kind with one HTTP status
// (given beside each constant). It is package errkind's Kind.
type ErrorKind = errkind.Kind

// The error kinds. Every sentinel error of this package and of the ones
// below it that the server answers with a status other than 500 carries
// one of them.
const (
	// KindInternal is any other failure: a bug, an I/O error, damaged
	// data; also the kind of a nil error. HTTP 500.
	KindInternal = errkind.Internal
	// KindInvalid is a request wrong as it stands (a bad field, name,
	// query, prompt or archive; *FieldError). HTTP 400.
	KindInvalid = errkind.Invalid
	// KindNotFound is a cube, memory, pack, adapter, model or job that
	// does not exist (ErrUnknownCube, ErrModelNotFound). HTTP 404.
	KindNotFound = errkind.NotFound
	// KindConflict is a request at odds with the current state
	// (ErrCubeExists, ErrJobState). HTTP 409.
	KindConflict = errkind.Conflict
	// KindBusy is a request refused because the queue is full (ErrBusy);
	// retry after a while. HTTP 429.
	KindBusy = errkind.Busy
	// KindUnavailable is a request that cannot be served now (ErrClosed,
	// ErrNoModel, the shared text store unreachable, the KV cache or the
	// adapter budget full); retry later. HTTP 503.
	KindUnavailable = errkind.Unavailable
	// KindNoSpace is a write refused for lack of disk space (ErrNoSpace)
	// or of activation tier KV budget. HTTP 507.
	KindNoSpace = errkind.NoSpace
	// KindTooLarge is a text over Options.MaxTextBytes. HTTP 413.
	KindTooLarge = errkind.TooLarge
	// KindNotSupported is what the configured backend cannot do
	// (ErrNotSupported, tiers without a model). HTTP 501.
	KindNotSupported = errkind.NotSupported
	// KindUpstream is a failure or unusable answer of the upstream Ollama
	// server or the embedder (ErrUpstream). HTTP 502.
	KindUpstream = errkind.Upstream
	// KindCanceled is a request whose context was canceled. HTTP 499.
	KindCanceled = errkind.Canceled
	// KindTimeout is a request whose context deadline passed. HTTP 504.
	KindTimeout = errkind.Timeout
)

// KindOf returns the kind of err: that of the first error it wraps (err
// itself first, then depth first) that carries one, else KindCanceled for
// an err wrapping context.Canceled, KindTimeout for one wrapping
// context.DeadlineExceeded, and KindInternal otherwise or for nil.
func KindOf(err error) ErrorKind { return errkind.Of(err) }

// FieldError is a request that is invalid because of one field (HTTP 400
// naming it): Field is the request's field path ("messages",
// "context[3]", "adapters"), Msg says what is wrong with it. Its kind is
// KindInvalid. It is package errkind's FieldError, so the packages
// below this one return the same type.
type FieldError = errkind.FieldError

// badField returns a *FieldError.
func badField(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
