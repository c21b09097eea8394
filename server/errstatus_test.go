package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/memosrt/memosrt"
	"github.com/memosrt/memosrt/convmem"
	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/embed"
	"github.com/memosrt/memosrt/kvcache"
	"github.com/memosrt/memosrt/lora"
	"github.com/memosrt/memosrt/runtime"
	"github.com/memosrt/memosrt/runtime/llama"
	"github.com/memosrt/memosrt/scheduler"
	"github.com/memosrt/memosrt/server/wire"
	"github.com/memosrt/memosrt/textmem"
)

// TestErrStatusSentinels pins the HTTP status, OpenAI error type and text of
// every sentinel the API maps, bare and wrapped once with fmt.Errorf("%w").
func TestErrStatusSentinels(t *testing.T) {
	const (
		inv      = "invalid_request_error"
		srv      = "server_error"
		notFound = "not_found_error"
	)
	cases := []struct {
		err  error
		msg  string
		code int
		typ  string
	}{
		{textmem.ErrTooLarge, "textmem: text too large", 413, inv},
		{textmem.ErrUnavailable, "textmem: store unavailable", 503, srv},
		{memosrt.ErrBusy, "memosrt: queue full", 429, "rate_limit_error"},
		{memosrt.ErrNoModel, "memosrt: no model loaded", 503, srv},
		{ErrClosed, "server: closed", 503, srv},
		{memosrt.ErrClosed, "memosrt: closed", 503, srv},
		{runtime.ErrNoKVSlot, "llama: no KV cache slot for the batch (n_ctx full)", 503, srv},
		{llama.ErrNoKVSlot, "llama: no KV cache slot for the batch (n_ctx full)", 503, srv},
		{runtime.ErrClosed, "runtime: engine closed", 503, srv},
		{lora.ErrBadName, "lora: bad adapter name or spec", 400, inv},
		{lora.ErrBadAdapter, "lora: adapter refused", 400, inv},
		{lora.ErrChanged, "lora: adapter file changed since it was registered", 400, inv},
		{lora.ErrBudget, "lora: adapter memory budget exceeded", 503, srv},
		{memosrt.ErrUnknownCube, "memosrt: unknown cube", 404, notFound},
		{textmem.ErrNotFound, "textmem: memory not found", 404, notFound},
		{textmem.ErrNoRecord, "textmem: no cube record", 404, notFound},
		{kvcache.ErrNotFound, "kvcache: pack not found", 404, notFound},
		{errModelNotFound, "model not found", 404, notFound},
		{memosrt.ErrModelNotFound, "memosrt: model not found", 404, notFound},
		{lora.ErrNotFound, "lora: adapter not found", 404, notFound},
		{errRouteNotFound, "server: no such endpoint", 404, notFound},
		{convmem.ErrNotFound, "convmem: not found", 404, notFound},
		{memosrt.ErrCubeExists, "memosrt: cube exists", 409, inv},
		{memosrt.ErrJobState, "memosrt: the job is not done", 409, inv},
		{memosrt.ErrNotSupported, "memosrt: not supported by this backend", 501, "not_implemented"},
		{scheduler.ErrReadOnly, "scheduler: tiers opened without a model (read-only)", 501, "not_implemented"},
		{memosrt.ErrUpstream, "memosrt: upstream failed", 502, srv},
		{embed.ErrBadVector, "embed: unusable vector", 502, srv},
		{embed.ErrShape, "embed: wrong vector shape", 502, srv},
		{wire.ErrMethodNotAllowed, "server: method not allowed", 405, inv},
		{wire.ErrUnauthorized, "server: missing or wrong bearer token", 401, "authentication_error"},
		{wire.ErrForbidden, "server: this access key may not use that", 403, "permission_error"},
		{wire.ErrBodyTimeout, "server: request body not received in time", 408, inv},
		{scheduler.ErrKVBudget, "scheduler: activation tier KV budget exceeded", 507, srv},
		{memosrt.ErrNoSpace, "badger: not enough free disk space", 507, srv},
		{datadir.ErrNoSpace, "badger: not enough free disk space", 507, srv},
		{textmem.ErrBadCube, "textmem: bad cube name", 400, inv},
		{textmem.ErrEmptyText, "textmem: empty text", 400, inv},
		{textmem.ErrInvalidUTF8, "textmem: invalid utf-8", 400, inv},
		{textmem.ErrBadField, "textmem: bad field", 400, inv},
		{textmem.ErrBadQuery, "textmem: bad query", 400, inv},
		{memosrt.ErrBadArchive, "memosrt: bad cube archive", 400, inv},
		{runtime.ErrPromptTooLong, "runtime: prompt longer than the context (n_ctx)", 400, inv},
		{runtime.ErrEmptyPrompt, "runtime: empty prompt", 400, inv},
		{kvcache.ErrCorrupt, "kvcache: corrupt blob", 400, inv},
		{kvcache.ErrVersion, "kvcache: unsupported blob format version", 400, inv},
		{llama.ErrGrammar, "llama: grammar", 400, inv},
		{llama.ErrBadParams, "llama: sampler parameter out of range", 400, inv},
		{context.Canceled, "context canceled", 499, "canceled"},
		{context.DeadlineExceeded, "context deadline exceeded", 504, "timeout"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.msg {
			t.Errorf("text %q, want %q", got, c.msg)
		}
		for _, err := range []error{c.err, fmt.Errorf("context: %w", c.err)} {
			code, typ := wire.Status(err)
			if code != c.code || typ != c.typ {
				t.Errorf("wire.Status(%q) = %d %q, want %d %q", err, code, typ, c.code, c.typ)
			}
		}
	}
}

// TestErrStatusShapes pins the status of the error shapes the handlers
// build: field errors, wrappers, and errors that wrap two sentinels.
func TestErrStatusShapes(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		code  int
		typ   string
		field string
	}{
		{"badField", wire.BadField("messages", "empty"), 400, "invalid_request_error", "messages"},
		{"memosrt.FieldError", &memosrt.FieldError{Field: "context[3]", Msg: "bad"}, 400, "invalid_request_error", "context[3]"},
		{"wrapped FieldError", fmt.Errorf("add: %w", &memosrt.FieldError{Field: "adapters", Msg: "bad"}), 400, "invalid_request_error", "adapters"},
		{"MaxBytesError", &http.MaxBytesError{Limit: 10}, 413, "invalid_request_error", ""},
		{"InField TooLarge", wire.InField("memories[2].text", textmem.ErrTooLarge), 413, "invalid_request_error", "memories[2].text"},
		{"InField InvalidUTF8", wire.InField("text", textmem.ErrInvalidUTF8), 400, "invalid_request_error", "text"},
		{"forbidden cube", fmt.Errorf("%w: cube %q (the key is for %q)", wire.ErrForbidden, "a", "b"), 403, "permission_error", ""},
		{"body timeout over deadline", fmt.Errorf("%w: body: %w", wire.ErrBodyTimeout, os.ErrDeadlineExceeded), 408, "invalid_request_error", ""},
		{"archive over corrupt pack", fmt.Errorf("%w: packs/x: %w", memosrt.ErrBadArchive, kvcache.ErrCorrupt), 400, "invalid_request_error", ""},
		{"archive over body limit", fmt.Errorf("%w: %w", memosrt.ErrBadArchive, &http.MaxBytesError{Limit: 10}), 413, "invalid_request_error", ""},
		{"archive over body timeout", fmt.Errorf("%w: %w", memosrt.ErrBadArchive, wire.ErrBodyTimeout), 408, "invalid_request_error", ""},
		{"archive over canceled", fmt.Errorf("%w: %w", memosrt.ErrBadArchive, context.Canceled), 400, "invalid_request_error", ""},
		{"busy over scheduler busy", fmt.Errorf("%w: %w", memosrt.ErrBusy, scheduler.ErrBusy), 429, "rate_limit_error", ""},
		{"closed over canceled", fmt.Errorf("%w: cancelled at shutdown: %w", memosrt.ErrClosed, context.Canceled), 503, "server_error", ""},
		{"upstream over deadline", fmt.Errorf("%w: %w", memosrt.ErrUpstream, context.DeadlineExceeded), 502, "server_error", ""},
		{"unavailable over canceled", fmt.Errorf("%w: %v", textmem.ErrUnavailable, context.Canceled), 503, "server_error", ""},
		{"bad cube field", fmt.Errorf("%w: %q", textmem.ErrBadCube, "a/b"), 400, "invalid_request_error", "cube"},
		{"empty text field", textmem.ErrEmptyText, 400, "invalid_request_error", "text"},
		{"too large field", textmem.ErrTooLarge, 413, "invalid_request_error", "text"},
		{"prompt field", runtime.ErrPromptTooLong, 400, "invalid_request_error", "prompt"},
		{"empty prompt field", runtime.ErrEmptyPrompt, 400, "invalid_request_error", "prompt"},
		{"adapter not found field", lora.ErrNotFound, 404, "not_found_error", "adapters"},
		{"adapter changed field", lora.ErrChanged, 400, "invalid_request_error", "adapters"},
		{"unmapped sentinel", textmem.ErrClosed, 500, "server_error", ""},
		{"unmapped mismatch", kvcache.ErrMismatch, 500, "server_error", ""},
		{"no room", memosrt.ErrNoRoom, 500, "server_error", ""},
		{"scheduler busy alone", scheduler.ErrBusy, 500, "server_error", ""},
		{"plain error", errors.New("boom"), 500, "server_error", ""},
	}
	for _, c := range cases {
		code, typ := wire.Status(c.err)
		if code != c.code || typ != c.typ {
			t.Errorf("%s: wire.Status = %d %q, want %d %q", c.name, code, typ, c.code, c.typ)
		}
		if f := wire.Field(c.err); f != c.field {
			t.Errorf("%s: wire.Field = %q, want %q", c.name, f, c.field)
		}
	}
}
