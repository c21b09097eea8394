package textmem

import (
	"github.com/memosrt/memosrt/badger"
)

type badgerDB = badger.DB

func openBadger(dir string) (*badger.DB, error) {
	return badger.Open(badger.Options{Dir: dir, NoSync: true})
}
