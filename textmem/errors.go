package textmem

import (
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

// Sentinel errors. Callers test them with errors.Is; the returned error may
// wrap them with the values that explain it.
var (
	// ErrNotFound is returned by Get, Update, Delete and History when the
	// cube holds no memory with that id (including ids that are not
	// well-formed).
	ErrNotFound = errkind.New(errkind.NotFound, "textmem: memory not found")

	// ErrEmptyText is returned by Add and Update when the text is empty or
	// whitespace only. Nothing is stored.
	ErrEmptyText = errkind.New(errkind.Invalid, "textmem: empty text")

	// ErrInvalidUTF8 is returned when a text, query, kind, tag or source is
	// not valid UTF-8. Nothing is stored.
	ErrInvalidUTF8 = errkind.New(errkind.Invalid, "textmem: invalid utf-8")

	// ErrBadCube is returned when a cube name is not 1..64 characters of
	// [A-Za-z0-9._-], or is "." or "..".
	ErrBadCube = errkind.New(errkind.Invalid, "textmem: bad cube name")

	// ErrTooLarge is returned by Add and Update when the text is longer than
	// Options.MaxTextBytes, or when its index postings do not fit one Badger
	// transaction (with package datadir's defaults, about 20 000 distinct
	// terms: more than a 64 KiB text can hold). Nothing is stored.
	ErrTooLarge = errkind.New(errkind.TooLarge, "textmem: text too large")

	// ErrClosed is returned by every method of a closed Store.
	ErrClosed = errors.New("textmem: closed")

	// ErrBadID is returned by Import for an id of another shape than the
	// ones Add assigns.
	ErrBadID = errors.New("textmem: bad memory id")

	// ErrIDExists is returned by Import when the cube already holds a
	// memory with that id.
	ErrIDExists = errors.New("textmem: memory id exists")

	// ErrBadField is returned by Add, Import and Patch for a field out of
	// its range (a confidence outside [0, 1]).
	ErrBadField = errkind.New(errkind.Invalid, "textmem: bad field")

	// ErrDamaged is returned when a stored record does not read back as it
	// was written: its checksum does not match, or the store's own
	// checksums failed under it (package datadir's ErrDamaged). The error
	// names the record's key (t/<cube>/m/<id> for a memory); nothing of
	// the record is returned. Get returns it; List and Search leave the
	// record out. Each one found is logged and counted (Store.Damaged).
	ErrDamaged = errors.New("textmem: damaged record")

	// ErrBadQuery is returned by SearchWith when the Query is inconsistent
	// (for example Until before Since).
	ErrBadQuery = errkind.New(errkind.Invalid, "textmem: bad query")
)
