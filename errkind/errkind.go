package errkind

import (
	"context"
	"errors"
	"strconv"
)

// Kind is what an error means to the caller. The zero value is Internal.
type Kind int

const (
	// Internal is a failure the caller cannot fix or retry into success:
	// a bug, an I/O error, damaged data. HTTP 500.
	Internal Kind = iota
	// Invalid is a request that is wrong as it stands: a bad field, name,
	// query or input file. Retrying it unchanged fails again. HTTP 400.
	Invalid
	// NotFound is a request for something that does not exist: a cube,
	// memory, pack, adapter, model or conversation job. HTTP 404.
	NotFound
	// Conflict is a request at odds with the current state: a name in use,
	// a job in the wrong state. HTTP 409.
	Conflict
	// Busy is a request refused because too many wait already; retry
	// after a while. HTTP 429.
	Busy
	// Unavailable is a request the service cannot serve now: closed, no
	// model loaded, the store unreachable, no cache room; retry later or
	// elsewhere. HTTP 503.
	Unavailable
	// NoSpace is a write refused for lack of storage: disk space or a
	// memory budget. HTTP 507.
	NoSpace
	// TooLarge is an input over a size limit. HTTP 413.
	TooLarge
	// NotSupported is an operation this configuration cannot do. HTTP 501.
	NotSupported
	// Upstream is a bad answer from a service this one relies on (the
	// upstream model server, the embedder). HTTP 502.
	Upstream
	// Canceled is a request whose caller gave up (context.Canceled);
	// nobody reads the answer. HTTP 499, nginx's "client closed request".
	Canceled
	// Timeout is a request that ran past its deadline
	// (context.DeadlineExceeded). HTTP 504.
	Timeout
)

var names = [...]string{
	Internal:     "internal",
	Invalid:      "invalid",
	NotFound:     "not_found",
	Conflict:     "conflict",
	Busy:         "busy",
	Unavailable:  "unavailable",
	NoSpace:      "no_space",
	TooLarge:     "too_large",
	NotSupported: "not_supported",
	Upstream:     "upstream",
	Canceled:     "canceled",
	Timeout:      "timeout",
}

// String returns the kind's name in snake case ("not_found"), or
// "kind(N)" for a value outside the constants.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(names) {
		return names[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// kinded is the interface Of looks for in an error's tree.
type kinded interface {
	error
	Kind() Kind
}

// sentinel is the error New returns: one allocation per variable, so
// errors.Is compares it by identity as it does errors.New's.
type sentinel struct {
	kind Kind
	msg  string
}

func (e *sentinel) Error() string { return e.msg }
func (e *sentinel) Kind() Kind    { return e.kind }

// New returns an error whose Error() is msg and whose kind is k. Like
// errors.New, each call returns a distinct error: declare a sentinel once
// and test it with errors.Is.
func New(k Kind, msg string) error {
	return &sentinel{kind: k, msg: msg}
}

// Of returns the kind of err: that of the first error in its tree (the
// order errors.As walks: err, then what it wraps, depth first) with a
// Kind() Kind method. An error with none is Canceled when it wraps
// context.Canceled, Timeout when it wraps context.DeadlineExceeded, and
// otherwise Internal; so is a nil err.
func Of(err error) Kind {
	if err == nil {
		return Internal
	}
	var k kinded
	if errors.As(err, &k) {
		return k.Kind()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return Timeout
	}
	return Internal
}

// FieldError is a request that is invalid because of one field: Field is
// the request's field path ("messages", "context[3]",
// "tools[0].function.name"), Msg says what is wrong with it. Its kind is
// Invalid; the server answers it with HTTP 400 naming the field.
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "Field: Msg".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Kind returns Invalid.
func (e *FieldError) Kind() Kind { return Invalid }
