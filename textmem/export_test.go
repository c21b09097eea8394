package textmem

import (
	"context"
	"time"

	"github.com/memosrt/memosrt/datadir"
)

type badgerDB = datadir.DB

func openBadger(dir string) (*datadir.DB, error) {
	return datadir.Open(datadir.Options{Dir: dir, NoSync: true})
}

// The PostgreSQL backend lives in package textmem/postgres, which imports
// this one, so this package's own tests reach it through these, set by
// postgres_link_test.go (package textmem_test, linked into the same test
// binary): the Store tests run over it as they run over Badger.
type (
	// PostgresOptions are the postgres.Options the tests set.
	PostgresOptions struct {
		Key     []byte
		Timeout time.Duration
	}
	// Postgres is a *postgres.Store.
	Postgres interface {
		Backend
		Close() error
		Up() bool
	}
)

var (
	// OpenPostgres is postgres.Open.
	OpenPostgres func(ctx context.Context, url string, o PostgresOptions) (Postgres, error)
	// ErrWrongKey is postgres.ErrWrongKey.
	ErrWrongKey error
)
