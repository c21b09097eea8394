package accesskey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/datadir"
	"github.com/memosrt/memosrt/textmem"
)

// legacyPrefix is where the data directory kept access keys before they
// moved into the text store: srv/key/<sha256 hex of the token> → the key as
// JSON with one cube ({"id","cube","created","cube_created"}).
const legacyPrefix = "srv/key/"

// Migrate moves the keys db keeps under its own prefix (the format before
// keys lived in the text store) into s: each becomes a key of the same id
// with a Write grant on its cube, then its old record is deleted. A key
// already in s is not written again, so a Migrate cut short is finished by
// the next. It returns how many keys it moved.
func (s *Store) Migrate(ctx context.Context, db *datadir.DB) (int, error) {
	type old struct {
		hash string
		v    []byte
	}
	var olds []old
	err := db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(legacyPrefix), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			olds = append(olds, old{string(it.Item().Key()[len(legacyPrefix):]), v})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("accesskey: read the data directory's keys: %w", err)
	}
	for _, o := range olds {
		k, err := decode(o.v)
		if err != nil {
			return 0, fmt.Errorf("accesskey: key record %s%s: %w", legacyPrefix, o.hash, err)
		}
		if k.ID == "" && len(o.hash) >= 12 {
			k.ID = o.hash[:12]
		}
		js, _ := json.Marshal(k)
		err = s.be.Update(ctx, textmem.KeySpace, func(txn textmem.Txn) error {
			if _, err := txn.Get([]byte(pHash + o.hash)); err == nil {
				return nil // moved by a Migrate cut short
			} else if !errors.Is(err, textmem.ErrKeyNotFound) {
				return err
			}
			if err := txn.Set([]byte(pHash+o.hash), js); err != nil {
				return err
			}
			return txn.Set([]byte(pID+k.ID), []byte(o.hash))
		})
		if err != nil {
			return 0, fmt.Errorf("accesskey: move key %s into the text store: %w", k.ID, err)
		}
		if err := db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(legacyPrefix + o.hash)) }); err != nil {
			return 0, fmt.Errorf("accesskey: delete the moved key %s: %w", k.ID, err)
		}
	}
	return len(olds), nil
}
