package textmem

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/memosrt/memosrt/internal/testutil"
)

// pgServer is the PostgreSQL server of this test binary when
// MEMOSRT_TEST_TEXT_STORE is postgres (plain records) or postgres-sealed
// (with a Key): the Store tests then run over it (`make test` runs them
// over each backend).
var (
	pgServer *testutil.PostgresServer
	pgSealed bool
	pgMu     sync.Mutex
	pgByDir  = map[string]string{}
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestMain(m *testing.M) {
	mode := os.Getenv("MEMOSRT_TEST_TEXT_STORE")
	var stop func()
	switch mode {
	case "", "badger":
	case "postgres", "postgres-sealed":
		var ok bool
		if pgServer, stop, ok = testutil.StartPostgresMain(); !ok {
			fmt.Fprintln(os.Stderr, "MEMOSRT_TEST_TEXT_STORE="+mode+": PostgreSQL not found (apt-get install postgresql)")
			if os.Getenv("CI") != "" {
				os.Exit(1)
			}
			fmt.Println("skipped: no PostgreSQL")
			os.Exit(0)
		}
		pgSealed = mode == "postgres-sealed"
	default:
		fmt.Fprintln(os.Stderr, "MEMOSRT_TEST_TEXT_STORE: want badger, postgres or postgres-sealed, not", mode)
		os.Exit(2)
	}
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// openPostgresFor returns a Postgres backend over the database of dir
// (made on first use, so reopening dir reopens its records), closed at
// the end of the test.
func openPostgresFor(t testing.TB, dir string) Postgres {
	t.Helper()
	pgMu.Lock()
	url, ok := pgByDir[dir]
	if !ok {
		url = pgServer.CreateDB()
		pgByDir[dir] = url
	}
	pgMu.Unlock()
	var key []byte
	if pgSealed {
		key = testKey
	}
	p, err := OpenPostgres(context.Background(), url, PostgresOptions{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// backendFor is the Backend tests reopen dir's records with: Badger over
// db, or dir's PostgreSQL database.
func backendFor(t testing.TB, db *badgerDB, dir string) Backend {
	if pgServer != nil {
		return openPostgresFor(t, dir)
	}
	return NewBadgerBackend(db)
}
