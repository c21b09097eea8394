package memosrt

import (
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
	ErrTextStoreElsewhere = textmem.ErrStoreElsewhere
	// ErrCubeExists is returned by CreateCube for a name in use; HTTP 409.
	ErrCubeExists = textmem.ErrCubeExists
	// ErrNotSupported is returned for what the configured backend cannot
	// do (the upstream backend has no KV packs or adapters); HTTP 501.
	ErrNotSupported = pipeline.ErrNotSupported
	// ErrUpstream is returned by the upstream backend when the upstream
	// server fails: unreachable, timed out, a 5xx, a refused API key, a
	// stream that ends early (an Ollama line longer than the client's
	// 8 MiB buffer is dropped silently by the client); HTTP 502.
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

// The error kinds (package errkind says what each means). Every sentinel
// error of this package and of the ones below it that the server answers
// with a status other than 500 carries one of them.
const (
	KindInternal     = errkind.Internal     // a bug, an I/O error, damaged data; a nil error. HTTP 500
	KindInvalid      = errkind.Invalid      // a bad field, name, query, prompt or archive (*FieldError). HTTP 400
	KindNotFound     = errkind.NotFound     // ErrUnknownCube, ErrModelNotFound, a memory, pack, adapter or job. HTTP 404
	KindConflict     = errkind.Conflict     // ErrCubeExists, ErrJobState, ErrUndoChanged, ErrFeedbackConflict. HTTP 409
	KindBusy         = errkind.Busy         // ErrBusy: retry after a while. HTTP 429
	KindUnavailable  = errkind.Unavailable  // ErrClosed, ErrNoModel, a store unreachable, no cache room. HTTP 503
	KindNoSpace      = errkind.NoSpace      // ErrNoSpace, the activation tier's KV budget. HTTP 507
	KindTooLarge     = errkind.TooLarge     // a text over Options.MaxTextBytes. HTTP 413
	KindNotSupported = errkind.NotSupported // ErrNotSupported, tiers without a model. HTTP 501
	KindUpstream     = errkind.Upstream     // ErrUpstream, the embedder. HTTP 502
	KindCanceled     = errkind.Canceled     // the caller's context canceled. HTTP 499
	KindTimeout      = errkind.Timeout      // the caller's context deadline passed. HTTP 504
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
