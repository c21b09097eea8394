package textmem

import (
	"context"
	"errors"

	"github.com/memosrt/memosrt/errkind"
)

// Backend is where a Store keeps its records: per cube, a sorted map of
// keys to values read and written in transactions, plus one record per
// cube for the cube registry of package memosrt. Keys handed to a Backend
// are relative to their cube (for example "m/<id>", see keys.go); the
// Backend keeps cubes apart. Two implementations: the embedded Badger
// database (NewBadgerBackend, the default) and PostgreSQL
// (package textmem/postgres), which several nodes share.
//
// Besides cubes, a Backend keeps spaces of the server's own records under
// names that are no cube names (ValidCube refuses them): KeySpace holds
// serve's access keys (package accesskey), so that every node sharing the
// store sees the same keys. View, Update, Bulk and DeletePrefix take such a
// name as they take a cube; Cubes never returns one, and none has a
// registry record.
//
// Every method is safe for concurrent use. Errors that mean the store
// cannot be reached now (connection refused or lost, a bounded wait run
// out) wrap ErrUnavailable; a write that returned such an error may or may
// not have committed, but one that returned nil has.
type Backend interface {
	// View runs fn in a read-only transaction over cube.
	View(ctx context.Context, cube string, fn func(Txn) error) error

	// Update runs fn in a read-write transaction over cube and commits
	// it. When the transaction conflicts with a concurrent one, fn is run
	// again in a new transaction (so fn must set, not accumulate, what it
	// returns through captured variables). A transaction too large for
	// the backend returns an error wrapping ErrTxnTooBig.
	Update(ctx context.Context, cube string, fn func(Txn) error) error

	// Bulk writes many records to cube outside one transaction (a rebuild
	// of a cube's index); put is the only write. After an error part of
	// the records may be written.
	Bulk(ctx context.Context, cube string, fn func(put func(key, value []byte) error) error) error

	// DeletePrefix deletes every key of cube that starts with prefix (the
	// whole cube for an empty prefix), in one or more transactions.
	DeletePrefix(ctx context.Context, cube string, prefix []byte) error

	// Cubes returns the names of the cubes holding at least one key that
	// starts with prefix, in no particular order; never a space such as
	// KeySpace.
	Cubes(ctx context.Context, prefix []byte) ([]string, error)

	// Record returns the registry record of cube; ErrNoRecord when it has
	// none.
	Record(ctx context.Context, cube string) ([]byte, error)
	// CreateRecord stores rec as cube's registry record; ErrRecordExists
	// when it has one.
	CreateRecord(ctx context.Context, cube string, rec []byte) error
	// Records returns every registry record by cube name.
	Records(ctx context.Context) (map[string][]byte, error)
	// DeleteRecord removes cube's registry record (none is not an error).
	DeleteRecord(ctx context.Context, cube string) error

	// MaxKey is the longest key of cube, in bytes, the backend stores.
	MaxKey(cube string) int
}

// KeySpace is the Backend space of serve's access keys (package
// accesskey): '#' keeps it apart from every cube name.
const KeySpace = "#keys"

// Watcher is a Backend that other processes write too: Watch calls fn
// with every change another process committed, after its commit, until
// stop is called. Change.All (after a lost connection) means any cube may
// have changed.
type Watcher interface {
	Watch(fn func(Change)) (stop func())
}

// Change is one committed change seen by a Watcher.
type Change struct {
	Cube    string   // the cube changed; empty with All
	IDs     []string // when set, the memories changed (added, updated or deleted): nothing else of the cube did
	Deleted bool     // the cube was deleted
	All     bool     // changes may have been missed: treat every cube as changed
}

// Toucher is a Txn that tells other processes which memories a
// transaction changed (Change.IDs), so that they re-read those instead of
// reloading the whole cube. Store calls Touch for every memory it writes.
type Toucher interface {
	Touch(id string)
}

// Txn is one transaction of a Backend over one cube. Values returned by
// Get are the caller's to keep; the key and value Iterate passes to fn are
// valid only until fn returns (Badger's own buffers: a cube's index loads
// without a copy per posting), so fn copies what it keeps.
type Txn interface {
	// Get returns the value of key; ErrKeyNotFound if there is none.
	Get(key []byte) ([]byte, error)
	// Set stores value under key.
	Set(key, value []byte) error
	// Delete removes key (a missing key is not an error).
	Delete(key []byte) error
	// Iterate calls fn with every key starting with prefix, in key order;
	// with keysOnly the value is nil. A prefix ends with '/' or 0 (a whole
	// component of the key layout) or is empty. An error from fn stops the
	// iteration and is returned.
	Iterate(prefix []byte, keysOnly bool, fn func(key, value []byte) error) error
}

// RecordChecker is a Txn that can check, inside the transaction, that its
// cube still has a registry record (Options.RequireRecord): a write then
// cannot land in a cube another node is deleting.
type RecordChecker interface {
	// CheckRecord returns ErrNoRecord when the cube has none.
	CheckRecord() error
}

// Errors of Backends.
var (
	// ErrKeyNotFound is returned by Txn.Get for a missing key.
	ErrKeyNotFound = errors.New("textmem: key not found")
	// ErrTxnTooBig is wrapped by Update when the transaction is too large.
	ErrTxnTooBig = errors.New("textmem: transaction too big")
	// ErrUnavailable is wrapped by every error that means the store cannot
	// be reached now; the server answers 503 for it.
	ErrUnavailable = errkind.New(errkind.Unavailable, "textmem: store unavailable")
	// ErrNoRecord is returned by Backend.Record for a cube without one.
	ErrNoRecord = errkind.New(errkind.NotFound, "textmem: no cube record")
	// ErrRecordExists is returned by Backend.CreateRecord when cube has
	// one.
	ErrRecordExists = errors.New("textmem: cube record exists")
)
