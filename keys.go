package memosrt

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bg "github.com/dgraph-io/badger/v4"
)

// keyAccess is the key prefix of access keys: srv/key/<sha256 hex of the
// token> → AccessKey JSON. Only the hash is stored.
const keyAccess = "srv/key/"

// keyPrefix starts every access key token (tells them apart in logs).
const keyPrefix = "msk_"

// ErrUnknownKey is returned by KeyCube for a token that is no access key.
var ErrUnknownKey = errors.New("memosrt: unknown access key")

// AccessKey is a bearer token that may use one cube only (its memories,
// packs, chats and exports); the admin token (serve --token) may use all.
type AccessKey struct {
	ID      string    `json:"id"` // first 12 hex digits of the token's SHA-256
	Cube    string    `json:"cube"`
	Created time.Time `json:"created"`
	// CubeCreated is the creation time of the cube the key was minted
	// for: a cube deleted and created again under the same name (on
	// another node sharing the text store, unheard here) is another cube,
	// and the key no longer opens it. Zero in keys minted before it.
	CubeCreated time.Time `json:"cube_created,omitzero"`
}

// CreateKey returns a new access key for cube and its token (32 random
// bytes, hex, after "msk_"): the token is returned once and only its
// SHA-256 is stored. Errors: ErrUnknownCube, storage errors.
func (o *OS) CreateKey(ctx context.Context, cube string) (AccessKey, string, error) {
	if err := o.enter(); err != nil {
		return AccessKey{}, "", err
	}
	defer o.leave()
	rec, err := o.cubes.get(ctx, cube)
	if err != nil {
		return AccessKey{}, "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return AccessKey{}, "", err
	}
	tok := keyPrefix + hex.EncodeToString(b[:])
	h := hashToken(tok)
	k := AccessKey{ID: h[:12], Cube: cube, Created: o.opts.Clock.Now().UTC(), CubeCreated: rec.Created}
	js, _ := json.Marshal(k)
	err = o.db.Write(int64(len(js)), func(txn *bg.Txn) error { return txn.Set([]byte(keyAccess+h), js) })
	if err != nil {
		return AccessKey{}, "", fmt.Errorf("memosrt: store access key: %w", err)
	}
	return k, tok, nil
}

// KeyCube returns the access key of token, or ErrUnknownKey.
func (o *OS) KeyCube(ctx context.Context, token string) (AccessKey, error) {
	if !strings.HasPrefix(token, keyPrefix) {
		return AccessKey{}, ErrUnknownKey
	}
	var k AccessKey
	err := o.db.View(func(txn *bg.Txn) error {
		it, err := txn.Get([]byte(keyAccess + hashToken(token)))
		if err != nil {
			return err
		}
		return it.Value(func(v []byte) error { return json.Unmarshal(v, &k) })
	})
	if errors.Is(err, bg.ErrKeyNotFound) {
		return AccessKey{}, ErrUnknownKey
	}
	if err != nil || k.CubeCreated.IsZero() {
		return k, err
	}
	// the cube it was minted for, not one made since under its name
	rec, err := o.cubes.get(ctx, k.Cube)
	if errors.Is(err, ErrUnknownCube) || (err == nil && !rec.Created.Equal(k.CubeCreated)) {
		_ = o.db.Update(func(txn *bg.Txn) error { return txn.Delete([]byte(keyAccess + hashToken(token))) })
		return AccessKey{}, ErrUnknownKey
	}
	return k, err
}

// eachKey calls fn with every access key of this node and its Badger key.
func (o *OS) eachKey(fn func(dbKey []byte, k AccessKey)) error {
	return o.db.View(func(txn *bg.Txn) error {
		it := txn.NewIterator(bg.IteratorOptions{Prefix: []byte(keyAccess), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var k AccessKey
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &k) }); err != nil {
				return err
			}
			fn(it.Item().KeyCopy(nil), k)
		}
		return nil
	})
}

// keyCubes returns the cubes that have access keys on this node.
func (o *OS) keyCubes() ([]string, error) {
	var out []string
	err := o.eachKey(func(_ []byte, k AccessKey) {
		if !slices.Contains(out, k.Cube) {
			out = append(out, k.Cube)
		}
	})
	return out, err
}

// deleteKeys revokes cube's access keys (its cube is deleted).
func (o *OS) deleteKeys(cube string) error {
	var del [][]byte
	err := o.eachKey(func(dbKey []byte, k AccessKey) {
		if k.Cube == cube {
			del = append(del, dbKey)
		}
	})
	if err != nil || len(del) == 0 {
		return err
	}
	return o.db.Update(func(txn *bg.Txn) error {
		for _, k := range del {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func hashToken(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}
