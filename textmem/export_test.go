package textmem

import bg "github.com/dgraph-io/badger/v4"

type (
	bgTxn             = bg.Txn
	bgIteratorOptions = bg.IteratorOptions
)
