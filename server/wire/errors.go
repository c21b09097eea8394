package wire

import (
	"errors"
	"net/http"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/errkind"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/textmem"
)

// The server's own refusals: they carry no error kind, Status maps each.
var (
	// ErrUnauthorized is a request without the bearer token (or with a
	// wrong one); HTTP 401.
	ErrUnauthorized = errors.New("server: missing or wrong bearer token")
	// ErrForbidden is an access key used on a cube or route it may not
	// use; HTTP 403.
	ErrForbidden = errors.New("server: this access key may not use that")
	// ErrMethodNotAllowed is a path that is served, not with the request's
	// method; HTTP 405.
	ErrMethodNotAllowed = errors.New("server: method not allowed")
)

// httpError is the HTTP status and OpenAI error type of an error kind.
type httpError struct {
	code int
	typ  string
}

// kindStatus is the answer to each error kind; a kind missing here is
// answered as errkind.Internal.
var kindStatus = map[errkind.Kind]httpError{
	errkind.Internal:     {http.StatusInternalServerError, "server_error"},
	errkind.Invalid:      {http.StatusBadRequest, "invalid_request_error"},
	errkind.NotFound:     {http.StatusNotFound, "not_found_error"},
	errkind.Conflict:     {http.StatusConflict, "invalid_request_error"},
	errkind.Busy:         {http.StatusTooManyRequests, "rate_limit_error"},
	errkind.Unavailable:  {http.StatusServiceUnavailable, "server_error"}, // retry: closed, no model, the shared text store down
	errkind.NoSpace:      {http.StatusInsufficientStorage, "server_error"},
	errkind.TooLarge:     {http.StatusRequestEntityTooLarge, "invalid_request_error"},
	errkind.NotSupported: {http.StatusNotImplemented, "not_implemented"},
	errkind.Upstream:     {http.StatusBadGateway, "server_error"}, // the embedder or upstream gave an unusable answer
	errkind.Canceled:     {499, "canceled"},                       // client gone; nobody reads it
	errkind.Timeout:      {http.StatusGatewayTimeout, "timeout"},
}

// Status maps an error to its HTTP status code and OpenAI error type
// ("invalid_request_error", "server_error", ...): the server's own
// refusals first (ErrBodyTimeout 408, *http.MaxBytesError 413,
// ErrMethodNotAllowed 405, ErrUnauthorized 401, ErrForbidden and
// memosrt.ErrKeyDenied 403; they have no error kind), then its kind
// (errkind.Of) through one table; an error of no known kind is a 500.
func Status(err error) (code int, typ string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, ErrBodyTimeout):
		return http.StatusRequestTimeout, "invalid_request_error"
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, "invalid_request_error"
	case errors.Is(err, ErrMethodNotAllowed):
		return http.StatusMethodNotAllowed, "invalid_request_error"
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, "authentication_error"
	case errors.Is(err, ErrForbidden), errors.Is(err, memosrt.ErrKeyDenied):
		return http.StatusForbidden, "permission_error"
	}
	h, ok := kindStatus[errkind.Of(err)]
	if !ok {
		h = kindStatus[errkind.Internal]
	}
	return h.code, h.typ
}

// Field names the request field an error is about, for OpenAI's "param":
// a *memosrt.FieldError's field, InField's field, or the field a store
// sentinel is about ("cube", "text", "prompt", "adapters"); "" for none.
func Field(err error) string {
	var mfe *memosrt.FieldError
	var few *fieldErrorWrap
	switch {
	case errors.As(err, &mfe):
		return mfe.Field
	case errors.As(err, &few):
		return few.field
	case errors.Is(err, textmem.ErrBadCube):
		return "cube"
	case errors.Is(err, textmem.ErrEmptyText), errors.Is(err, textmem.ErrTooLarge):
		return "text"
	case errors.Is(err, runtime.ErrPromptTooLong), errors.Is(err, runtime.ErrEmptyPrompt):
		return "prompt"
	case errors.Is(err, lora.ErrNotFound), errors.Is(err, lora.ErrBadName), errors.Is(err, lora.ErrBadAdapter), errors.Is(err, lora.ErrChanged):
		return "adapters"
	}
	return ""
}

// InField returns err named as being about the request field field: its
// text "field: err", Field reports field, and it wraps err, so its status
// (Status) is err's (a store's ErrTooLarge stays a 413).
func InField(field string, err error) error { return &fieldErrorWrap{field: field, err: err} }

// fieldErrorWrap names the field of a store error and keeps its status.
type fieldErrorWrap struct {
	field string
	err   error
}

func (e *fieldErrorWrap) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldErrorWrap) Unwrap() error { return e.err }
