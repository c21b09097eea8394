package kvcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bg "github.com/dgraph-io/badger/v4"
)

// PackDamage is one stored pack whose bytes fail.
type PackDamage struct {
	ID    string // pack id (hex sha256); the record's key when it does not parse
	Label string // Header.Label: the cube the pack was warmed for, or "conv/..."
	Scope string // Header.Scope: the cube it is restored in ("" = unscoped)
	Err   error  // wraps ErrCorrupt or ErrVersion
}

// Check reads every pack this node stores and decodes it, verifying its
// chunks and checksum, and returns the packs whose bytes fail (ErrCorrupt,
// ErrVersion) and the pack records that do not parse (which Open already
// leaves out of the index). With drop, each damaged pack is deleted (a
// pack is recomputed by prefill when next needed) and counted in Damaged;
// a record that does not parse is deleted with its chunks. Returns the
// damage found and the first error that is not damage (I/O, ctx): packs
// after it are not checked.
func (c *Cache) Check(ctx context.Context, drop bool) ([]PackDamage, error) {
	var out []PackDamage
	var badRecs []string
	err := c.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyHeader)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var rec packRecord
			err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &rec) })
			if err != nil {
				id := string(it.Item().Key()[len(keyHeader):])
				badRecs = append(badRecs, id)
				out = append(out, PackDamage{ID: id, Err: fmt.Errorf("%w: pack record: %w", ErrCorrupt, err)})
			}
		}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("kvcache: check: %w", err)
	}
	c.mu.Lock()
	var recs []*packRecord
	for _, rec := range c.packs {
		if !rec.remote {
			recs = append(recs, rec)
		}
	}
	c.mu.Unlock()
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		h, _, err := c.readState(rec, nil)
		if err == nil && (h.TokensHash != rec.Header.TokensHash || h.KV != rec.Header.KV) {
			err = fmt.Errorf("%w: blob header does not match its pack record", ErrCorrupt)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
			return out, fmt.Errorf("kvcache: check pack %s: %w", rec.ID, err)
		}
		out = append(out, PackDamage{ID: rec.ID, Label: rec.Header.Label, Scope: rec.Header.Scope, Err: err})
		if drop {
			c.log.Warn("kvcache: damaged pack deleted", "pack", rec.ID[:12], "label", rec.Header.Label, "err", err)
			if err := c.Delete(rec.ID); err != nil {
				return out, err
			}
			c.damaged.Add(1)
		}
	}
	if drop {
		for _, id := range badRecs {
			if err := c.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyHeader + id)) }); err != nil {
				return out, fmt.Errorf("kvcache: check: %w", err)
			}
			if err := c.deleteChunks(id); err != nil {
				return out, err
			}
			c.damaged.Add(1)
		}
	}
	return out, nil
}
