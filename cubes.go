package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	bg "github.com/dgraph-io/badger/v4"

	"github.com/memosrt/memosrt/textmem"
)

// keyCube is the server's key prefix for cube records in the shared
// database: srv/cube/<name> → cubeRecord JSON.
const keyCube = "srv/cube/"

// cubeRecord is a created cube. textmem knows a cube only once it holds a
// memory; the registry lets a cube exist empty and carry a description.
type cubeRecord struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Created     time.Time         `json:"created"`
}

// cubeRegistry stores cube records. Safe for concurrent use (Badger
// transactions).
type cubeRegistry struct {
	db    *bg.DB
	store *textmem.Store
	now   func() time.Time
}

// adopt registers every cube that holds memories but has no record (cubes
// filled by `memosrt mem add` before the server ran).
func (c *cubeRegistry) adopt(ctx context.Context) error {
	names, err := c.store.Cubes(ctx)
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := c.create(ctx, cubeRecord{Name: n}); err != nil && !errors.Is(err, ErrCubeExists) {
			return err
		}
	}
	return nil
}

func (c *cubeRegistry) get(ctx context.Context, name string) (cubeRecord, error) {
	var rec cubeRecord
	if !textmem.ValidCube(name) {
		return rec, fmt.Errorf("%w: %q", textmem.ErrBadCube, name)
	}
	if err := ctx.Err(); err != nil {
		return rec, err
	}
	err := c.db.View(func(txn *bg.Txn) error {
		item, err := txn.Get([]byte(keyCube + name))
		if errors.Is(err, bg.ErrKeyNotFound) {
			return fmt.Errorf("%w: %q", ErrUnknownCube, name)
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return json.Unmarshal(v, &rec) })
	})
	return rec, err
}

func (c *cubeRegistry) exists(ctx context.Context, name string) (bool, error) {
	_, err := c.get(ctx, name)
	if errors.Is(err, ErrUnknownCube) {
		return false, nil
	}
	return err == nil, err
}

// create stores rec; ErrCubeExists if the name is taken.
func (c *cubeRegistry) create(ctx context.Context, rec cubeRecord) (cubeRecord, error) {
	if !textmem.ValidCube(rec.Name) {
		return rec, fmt.Errorf("%w: %q", textmem.ErrBadCube, rec.Name)
	}
	if err := ctx.Err(); err != nil {
		return rec, err
	}
	if rec.Created.IsZero() {
		rec.Created = c.now().UTC()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return rec, err
	}
	err = c.db.Update(func(txn *bg.Txn) error {
		if _, err := txn.Get([]byte(keyCube + rec.Name)); err == nil {
			return fmt.Errorf("%w: %q", ErrCubeExists, rec.Name)
		} else if !errors.Is(err, bg.ErrKeyNotFound) {
			return err
		}
		return txn.Set([]byte(keyCube+rec.Name), b)
	})
	return rec, err
}

func (c *cubeRegistry) list(ctx context.Context) ([]cubeRecord, error) {
	var out []cubeRecord
	err := c.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyCube), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			var rec cubeRecord
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &rec) }); err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

func (c *cubeRegistry) remove(ctx context.Context, name string) error {
	return c.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyCube + name)) })
}
