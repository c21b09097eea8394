package textmem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
)

// keyTextStore marks a data directory whose text tier is a shared store:
// its value names the store's kind.
const keyTextStore = "srv/text-store"

// ErrStoreElsewhere is returned by MarkStore without a store on a data
// directory whose text tier was kept in a shared store (serve
// --text-store): its own holds none of those memories.
var ErrStoreElsewhere = errors.New("memosrt: this data directory's memories are in a shared text store: start serve with --text-store and that store, and CLI commands on the directory go through the server (serve --text-store local serves the directory's own text tier instead)")

// MarkStore records in data directory db that its text tier is the
// shared store ts (ts set), or refuses to open it without one when it was
// (ErrStoreElsewhere) unless local, which forgets the mark; with ts set it
// also warns of memories the directory's own text tier holds, which the
// shared one does not serve. Errors: ErrStoreElsewhere, storage errors.
func MarkStore(ctx context.Context, db *datadir.DB, ts Backend, local bool, log *slog.Logger) error {
	var mark string
	err := db.View(func(txn *bg.Txn) error {
		item, err := txn.Get([]byte(keyTextStore))
		if errors.Is(err, bg.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		mark = string(v)
		return err
	})
	switch {
	case err != nil:
		return err
	case ts == nil && mark != "" && local:
		log.Warn("serving the data directory's own text tier, not the shared one it was served with", "was", mark)
		return db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyTextStore)) })
	case ts == nil && mark != "":
		return fmt.Errorf("%w (it was served with %s)", ErrStoreElsewhere, mark)
	case ts == nil:
		return nil
	}
	if own, err := Cubes(ctx, NewBadgerBackend(db)); err == nil && len(own) > 0 {
		log.Warn("the data directory's own text tier holds memories the shared text store does not serve: serve the directory with --text-store local, export each cube (GET /v1/cubes/CUBE/export) and import it (POST /v1/cubes/import) into a node of the shared store",
			"cubes", len(own))
	}
	name := fmt.Sprintf("%T", ts)
	if s, ok := ts.(fmt.Stringer); ok {
		name = s.String()
	}
	if mark == name {
		return nil
	}
	if mark != "" {
		log.Warn("the data directory was served with another text store", "was", mark, "now", name)
	}
	return db.Update(func(txn *bg.Txn) error { return txn.Set([]byte(keyTextStore), []byte(name)) })
}
