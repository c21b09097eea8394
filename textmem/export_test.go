package textmem

import (
	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/badger"
)

type (
	bgTxn             = bg.Txn
	bgIteratorOptions = bg.IteratorOptions
)

type badgerDB = badger.DB

func openBadger(dir string) (*badger.DB, error) {
	return badger.Open(badger.Options{Dir: dir, NoSync: true})
}
